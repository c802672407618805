"""The ``runtime`` object of a workbench namespace: cell code's calls to the host.

Every host method has an async method here — ``await runtime.inspect()``,
``await runtime.wait(seconds, reason)``, ``await runtime.workspace.run(["ls"])``,
``await runtime.evidence.resolve(["event:42"])``, ``await runtime.skills.load("deploy")``
— over the generic ``await runtime.request(method, **params)``, which stays stable as
methods are added. A
request sends a host_request and returns the value of the matching host_reply, or raises
HostError, the one exception type for a refusal, carrying ``code`` and ``message``.

Every request carries the execution id of the cell it comes from: the cell's task sets
EXECUTION_ID, and tasks a cell starts inherit it, even after the cell ends (the host then
refuses them: the scope ended with the cell).

``input()`` in a cell asks the host too (``runtime.input``), blocking the cell until
someone answers; with nobody to answer it raises EOFError.

A wait the host accepts ends the cell's turn: ``runtime.wait`` raises Yielded, a
BaseException, so code below the await does not run normally, and the worker reports the
cell ``yielded``. Catching it restores nothing: the host refuses the execution's further
requests.
"""
import contextvars
import io
import itertools
import math
import sys
import threading

from kiln.wire import REPLY_OK

EXECUTION_ID = contextvars.ContextVar("kiln_execution_id")

WAIT_METHOD = "runtime.wait"
WAIT_YIELDED = "yielded"  # the status of a wait reply that ends the turn
INPUT_METHOD = "runtime.input"
NO_INPUT = "no_input"  # the error code of an input() nobody can answer
INPUT_INTERRUPTED = "input_interrupted"  # the error code of an input() interrupted at its prompt


class HostError(Exception):
    """The host refused a request: ``code`` (an identifier) and ``message`` say why."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Yielded(BaseException):
    """The host accepted a wait: the cell's turn is over. ``value`` is the wait's reply."""

    def __init__(self, value):
        super().__init__(f"the cell ended its turn waiting: {value.get('reason', '')!r}")
        self.value = value


class _Workspace:
    """``runtime.workspace``: the workspace the host serves commands in."""

    def __init__(self, runtime):
        self._runtime = runtime

    async def info(self):
        """Return the workspace root and its settings."""
        return await self._runtime.request("workspace.info")

    async def run(self, argv, cwd=None, env=None, timeout_ms=None, max_output_bytes=None):
        """Run argv in the workspace; return its exit code or signal, bounded output, duration."""
        params = {"argv": list(argv)}
        for name, value in (("cwd", cwd), ("env", env), ("timeout_ms", timeout_ms),
                            ("max_output_bytes", max_output_bytes)):
            if value is not None:
                params[name] = value
        return await self._runtime.request("workspace.run", **params)


class _Evidence:
    """``runtime.evidence``: the durable record, by reference."""

    def __init__(self, runtime):
        self._runtime = runtime

    async def resolve(self, refs):
        """Resolve refs such as "event:42", "execution:c-3", "request:7"; each answers alone."""
        return await self._runtime.request("evidence.resolve", refs=list(refs))


class _Skills:
    """``runtime.skills``: the skills the host offers, by id."""

    def __init__(self, runtime):
        self._runtime = runtime

    async def index(self):
        """Return the valid skill ids, and the refused ones with their reasons."""
        return await self._runtime.request("skills.index")

    async def load(self, skill_id):
        """Return one skill's body (and digest), as the host indexed it."""
        return await self._runtime.request("skills.load", id=skill_id)


class Runtime:
    """Makes host requests for cell code; its requests are awaited on the worker's event loop."""

    HostError = HostError
    Yielded = Yielded

    def __init__(self, send_request, on_yield=None, wait_reply=None):
        """send_request(request_id, execution_id, request) sends a host_request, raising
        if the request cannot be encoded;
        on_yield(execution_id) is told when the host accepts a wait of that execution;
        wait_reply(request_id, execution_id) blocks the main thread until the host's
        reply to a request comes, and returns it (input() needs it).

        Requests are served once ``loop``, the worker's event loop, is set.
        """
        self.loop = None
        self._get_running_loop = None  # asyncio's, once a request is made
        self._send_request = send_request
        self._on_yield = on_yield
        self._wait_reply = wait_reply
        self._pending = {}  # request id -> (execution id, future of the reply)
        self._ids = itertools.count(1)
        self.workspace = _Workspace(self)
        self.evidence = _Evidence(self)
        self.skills = _Skills(self)

    async def request(self, method, **params):
        """Ask the host to perform method with params; return the reply's value.

        Raises HostError when the host replies with an error, and Yielded when it accepts
        a wait that ends the turn.
        """
        execution_id = EXECUTION_ID.get(None)
        if execution_id is None:
            raise RuntimeError("runtime.request() must be awaited by a cell or a task it started")
        get_running_loop = self._get_running_loop
        if get_running_loop is None:
            import asyncio  # here, not above: a worker whose cells never await does not load it

            get_running_loop = self._get_running_loop = asyncio.get_running_loop
        loop = get_running_loop()
        if self.loop is None or loop is not self.loop:
            raise RuntimeError("runtime.request() must be awaited on the worker's event loop")
        if not isinstance(method, str):
            raise TypeError(f"method must be a str, not {type(method).__name__}")
        request_id = self._new_id()
        self._send_request(request_id, execution_id, {"method": method, **params})
        reply = loop.create_future()
        self._pending[request_id] = (execution_id, reply)
        try:
            outcome = await reply
        finally:
            self._pending.pop(request_id, None)
        if outcome["kind"] != REPLY_OK:
            raise HostError(outcome["code"], outcome["message"])
        value = outcome["value"]
        if method == WAIT_METHOD and isinstance(value, dict) and value.get("status") == WAIT_YIELDED:
            if self._on_yield is not None:
                self._on_yield(execution_id)
            raise Yielded(value)
        return value

    def input(self, prompt=""):
        """input(): ask the host for a line, showing prompt; block until it answers.

        Raises EOFError at the end of the input, or when nobody can answer: outside a
        cell's main thread, or when the host has no one to ask; KeyboardInterrupt when
        the one answering interrupted at the prompt.
        """
        execution_id = EXECUTION_ID.get(None)
        if (execution_id is None or self._wait_reply is None
                or threading.current_thread() is not threading.main_thread()):
            raise EOFError("no one to answer input() here")
        sys.stdout.flush()  # what the cell printed comes before the question
        request_id = self._new_id()
        self._send_request(request_id, execution_id, {"method": INPUT_METHOD, "prompt": str(prompt)})
        outcome = self._wait_reply(request_id, execution_id)
        if outcome["kind"] != REPLY_OK:
            if outcome["code"] == NO_INPUT:
                raise EOFError(outcome["message"])
            if outcome["code"] == INPUT_INTERRUPTED:
                raise KeyboardInterrupt  # Ctrl-C at the prompt, as Python's own input() raises
            raise HostError(outcome["code"], outcome["message"])
        value = outcome["value"]
        if value is None:
            raise EOFError
        if not isinstance(value, str):
            raise HostError("invalid_reply", f"input() was answered with {type(value).__name__}, not str")
        return value

    def _new_id(self):
        """The next request's id; one still awaiting its reply (cell code that reset the
        counter) is refused, since its reply could not be told from the other's."""
        request_id = f"r-{next(self._ids)}"
        if request_id in self._pending:
            raise HostError("invalid_request", f"request id {request_id} is already awaiting its reply")
        return request_id

    def deliver(self, request_id, execution_id, reply):
        """Settle the pending request a host_reply answers; a reply nobody awaits is dropped."""
        pending = self._pending.get(request_id)
        if pending is None or pending[0] != execution_id or pending[1].done():
            return
        pending[1].set_result(reply)

    async def inspect(self):
        """Return the host's clock and this request's scope: now (UTC, Z), now_ms,
        session_id, generation, execution_id, and the inputs pending for the session."""
        return await self.request("runtime.inspect")

    async def wait(self, seconds=None, reason=""):
        """End the cell's turn waiting for input, for at most seconds (None: no deadline).

        seconds is None, or finite, > 0 and <= 600. When input is already pending, return
        at once with references to it; otherwise raise Yielded: code below the await does
        not run normally, and a later input starts a future cell.
        """
        if isinstance(seconds, float) and not math.isfinite(seconds):
            raise HostError("invalid_request",
                            f"seconds must be null or a finite number > 0 and <= 600, not {seconds!r}")
        return await self.request(WAIT_METHOD, seconds=seconds, reason=reason)


class InputStream(io.TextIOBase):
    """sys.stdin of a workbench: each readline() is an input() the host answers."""

    def __init__(self, runtime):
        super().__init__()
        self._runtime = runtime

    @property
    def name(self):
        """The stream's name, as for the standard streams."""
        return "<stdin>"

    @property
    def encoding(self):
        """Lines come as UTF-8 text."""
        return "utf-8"

    def readable(self):
        """The stream is readable, line by line."""
        return True

    def isatty(self):
        """The host answers, not a terminal."""
        return False

    def readline(self, size=-1):
        """Ask the host for one line; "" at the end of the input."""
        try:
            line = self._runtime.input() + "\n"
        except EOFError:
            return ""
        return line if size is None or size < 0 else line[:size]

    def read(self, size=-1):
        """Read lines until the end of the input (or size characters): each one asked."""
        parts, total = [], 0
        while size is None or size < 0 or total < size:
            line = self.readline()
            if not line:
                break
            parts.append(line)
            total += len(line)
        text = "".join(parts)
        return text if size is None or size < 0 else text[:size]
