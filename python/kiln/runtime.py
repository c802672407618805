"""The ``runtime`` object of a workbench namespace: cell code's calls to the host.

``await runtime.request("local.send", text="hello")`` sends a host_request and returns the
value of the matching host_reply, or raises HostError for an error reply. Every request
carries the execution id of the cell it comes from: the cell's task sets EXECUTION_ID, and
tasks a cell starts inherit it, even after the cell ends.
"""
import asyncio
import contextvars
import itertools

from kiln.wire import HOST_REQUEST, REPLY_OK

EXECUTION_ID = contextvars.ContextVar("kiln_execution_id")


class HostError(Exception):
    """The host refused a request: ``code`` (an identifier) and ``message`` say why."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Runtime:
    """Makes host requests for cell code; all of its methods run on the worker's event loop."""

    HostError = HostError

    def __init__(self, loop, post):
        """post(kind, fields) encodes a message (raising if it cannot) and sends it soon."""
        self._loop = loop
        self._post = post
        self._pending = {}  # request id -> (execution id, future of the reply)
        self._ids = itertools.count(1)

    async def request(self, method, **params):
        """Ask the host to perform method with params; return the reply's value.

        Raises HostError when the host replies with an error.
        """
        execution_id = EXECUTION_ID.get(None)
        if execution_id is None:
            raise RuntimeError("runtime.request() must be awaited by a cell or a task it started")
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError("runtime.request() must be awaited on the worker's event loop")
        if not isinstance(method, str):
            raise TypeError(f"method must be a str, not {type(method).__name__}")
        request_id = f"r-{next(self._ids)}"
        self._post(HOST_REQUEST, {"id": request_id, "execution_id": execution_id,
                                  "request": {"method": method, **params}})
        reply = self._loop.create_future()
        self._pending[request_id] = (execution_id, reply)
        try:
            outcome = await reply
        finally:
            self._pending.pop(request_id, None)
        if outcome["kind"] == REPLY_OK:
            return outcome["value"]
        raise HostError(outcome["code"], outcome["message"])

    def deliver(self, request_id, execution_id, reply):
        """Settle the pending request a host_reply answers; a reply nobody awaits is dropped."""
        pending = self._pending.get(request_id)
        if pending is None or pending[0] != execution_id or pending[1].done():
            return
        pending[1].set_result(reply)
