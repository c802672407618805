"""The workbench worker process: a persistent Python namespace that a kiln host drives.

The host starts it as::

    python3 -I -c LAUNCHER <pkgroot> --socket <path> --session <id> --generation <id>

with LAUNCHER ``import sys; sys.path.insert(0, sys.argv[1]); from kiln.worker import main;
main(sys.argv[2:])``, and writes the startup token, in hex, as the first line on its stdin.
The worker connects to the socket and says hello; from then on a reader thread takes the
host's frames as they come, while the main thread runs one asyncio event loop for good,
each cell a task on it.

An interrupt reaches the main thread as SIGINT. If a task is mid-step (the cell's own code,
or a background task holding the loop), KeyboardInterrupt is raised in it; if the loop is
idle, the cell's task is cancelled. Protocol errors end the process at once, non-zero.
"""
import asyncio
import contextvars
import functools
import os
import signal
import socket
import sys
import threading
import time
import types

from kiln import wire
from kiln.cells import Interpreter, format_exception
from kiln.output import CaptureStream, Ledger, OutputRouter, cap_error_text
from kiln.runtime import EXECUTION_ID, Runtime

EXIT_FAILURE = 2  # the exit status after a protocol error or a broken host connection

_SIGINT = {signal.SIGINT}
_SIGNAL_ATTEMPTS = 40  # repeats of one interrupt's SIGINT at most; then the host's hard stop rules
_SIGNAL_RETRY_SECONDS = 0.05
_OPTIONS = ("--socket", "--session", "--generation")


def main(argv):
    """Run a workbench worker; argv is ``--socket PATH --session ID --generation ID``.

    Never returns: the worker ends the process when the host says so or goes away.
    """
    options = _parse_options(argv)
    session_id, generation = options["--session"], options["--generation"]
    token = _read_token()
    _seal_stdin()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(options["--socket"])
        wire.write_frame(sock, wire.encode(session_id, generation, wire.HELLO, {
            "token": token, "role": wire.ROLE_WORKBENCH, "revision": None, "slots": []}))
    except OSError as err:
        _fail(f"cannot reach the host: {err}")
    del token
    Worker(sock, session_id, generation).serve()


def _diagnose(text):
    """Write one diagnostic line to the real stderr, which the host keeps a tail of."""
    os.write(2, f"kiln worker: {text}\n".encode("utf-8", "replace"))


def _fail(reason):
    """Say why on the real stderr and end the process at once."""
    _diagnose(reason)
    os._exit(EXIT_FAILURE)


def _parse_options(argv):
    options = dict(zip(argv[::2], argv[1::2]))
    if len(argv) != 2 * len(_OPTIONS) or sorted(options) != sorted(_OPTIONS):
        _fail(f"usage: --socket PATH --session ID --generation ID (got {argv!r})")
    for name in ("--session", "--generation"):
        if not wire.valid_identifier(options[name]):
            _fail(f"{name} {options[name]!r} is not an identifier")
    return options


def _read_token():
    """Read the startup token, the first line on stdin."""
    data = b""
    while b"\n" not in data and len(data) <= wire.MAX_IDENTIFIER_LEN:
        chunk = os.read(0, 256)
        if not chunk:
            break
        data += chunk
    token = data.split(b"\n", 1)[0].strip().decode("ascii", "replace")
    if not wire.valid_identifier(token):
        _fail("no startup token on stdin")
    return token


def _seal_stdin():
    """Point fd 0 and sys.stdin at /dev/null, so cell code reads nothing of the host's."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(0, encoding="utf-8", closefd=False)


def _wake():
    """Do nothing: scheduled from a signal handler, it wakes a loop idle in its selector."""


class _Cell:
    """One execute, from its arrival to its completed message."""

    __slots__ = ("id", "code", "ledger", "task", "interrupted", "signalled", "yielded")

    def __init__(self, cell_id, code):
        self.id = cell_id
        self.code = code
        self.ledger = Ledger()
        self.task = None  # set once the cell starts
        self.interrupted = False  # asked to stop: a cell that has not run yet will not
        self.signalled = False  # the SIGINT handler has acted on the latest interrupt
        self.yielded = False  # the host accepted a wait of this cell: its turn is over


class Worker:
    """Serves one host connection: cells on the main thread's loop, frames on a reader thread."""

    def __init__(self, sock, session_id, generation):
        self._sock = sock
        self._session_id = session_id
        self._generation = generation
        self._main_thread = threading.get_ident()
        self._write_lock = threading.Lock()
        # The _Cell accepted and not yet completed: only the reader sets it, from None; only
        # the main thread clears it.
        self._active = None
        self._loop = asyncio.new_event_loop()
        self._router = OutputRouter()
        self._runtime = Runtime(self._loop, self._post, self._on_yield)
        self._main = types.ModuleType("__main__")
        self._main.runtime = self._runtime
        self._interpreter = Interpreter(self._main.__dict__)
        self._handlers = {
            wire.EXECUTE: self._on_execute,
            wire.INVOKE: self._on_invoke,
            wire.INTERRUPT: self._on_interrupt,
            wire.HOST_REPLY: self._on_host_reply,
            wire.SHUTDOWN: self._on_shutdown,
        }

    def serve(self):
        """Take over the process's __main__, standard streams and SIGINT; serve forever."""
        asyncio.set_event_loop(self._loop)
        sys.modules["__main__"] = self._main
        sys.stdout = CaptureStream(self._router, wire.STREAM_STDOUT, 1)
        sys.stderr = CaptureStream(self._router, wire.STREAM_STDERR, 2)
        signal.signal(signal.SIGINT, self._on_sigint)
        threading.Thread(target=self._read, name="kiln-reader", daemon=True).start()
        while True:
            try:
                self._loop.run_forever()
            except KeyboardInterrupt:  # it hit a background task, not the cell: stop the cell
                cell = self._active
                if cell is not None and cell.task is not None:
                    cell.interrupted = True
                    cell.task.cancel()
            except SystemExit:
                _diagnose("a background task raised SystemExit; the worker serves on")
            except Exception as err:
                _fail(f"the event loop failed: {err!r}")

    # --- The reader thread ---------------------------------------------------------------

    def _read(self):
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)  # SIGINT is for the main thread
        try:
            stream = self._sock.makefile("rb")
            while True:
                payload = wire.read_frame(stream)
                kind, message = wire.decode(payload, self._session_id, self._generation)
                handler = self._handlers.get(kind)
                if handler is None:
                    _fail(f"the host sent a {kind} message")
                handler(message)
        except wire.EndOfStream:
            _fail("the host closed the connection")
        except BaseException as err:
            _fail(f"cannot read from the host: {type(err).__name__}: {err}")

    def _on_execute(self, message):
        if self._active is not None:
            self._send_failed(message["id"], "a cell is running; a workbench runs one at a time")
            return
        self._active = cell = _Cell(message["id"], message["code"])
        self._loop.call_soon_threadsafe(self._start, cell)

    def _on_invoke(self, message):
        self._send_failed(message["id"], "invoke is for the hooks role; this is a workbench")

    def _on_interrupt(self, message):
        cell = self._active
        if cell is None or cell.id != message["id"]:
            return  # unknown or finished: nothing to stop
        cell.interrupted = True
        cell.signalled = False  # each interrupt stops the cell once more
        signal.pthread_kill(self._main_thread, signal.SIGINT)
        threading.Thread(target=self._signal_again, args=(cell,),
                         name="kiln-interrupt", daemon=True).start()

    def _signal_again(self, cell):
        """Repeat SIGINT until the main thread's handler has acted for cell.

        A signal that lands just before a blocking call (time.sleep, select) wakes nothing:
        its handler waits for the call to return. Sending it again interrupts the call.
        """
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)
        for _ in range(_SIGNAL_ATTEMPTS):
            time.sleep(_SIGNAL_RETRY_SECONDS)
            if cell.signalled or self._active is not cell:
                return
            signal.pthread_kill(self._main_thread, signal.SIGINT)

    def _on_host_reply(self, message):
        self._loop.call_soon_threadsafe(
            self._runtime.deliver, message["id"], message["execution_id"], message["reply"])

    def _on_shutdown(self, message):
        for stream in (sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(0)

    # --- The main thread -----------------------------------------------------------------

    def _on_sigint(self, signum, frame):
        cell = self._active
        if cell is None or not cell.interrupted or cell.signalled:
            return  # SIGINT is the host's interrupt channel: others, and repeats, are ignored
        if cell.task is not None and cell.task.done():
            return
        cell.signalled = True
        if asyncio.current_task(self._loop) is not None:  # the cell, or a task holding the loop
            raise KeyboardInterrupt
        if cell.task is not None:  # the loop is between steps: the cell's next step is its end
            cell.task.cancel()
            self._loop.call_soon_threadsafe(_wake)

    def _start(self, cell):
        context = contextvars.Context()
        context.run(EXECUTION_ID.set, cell.id)
        cell.task = context.run(self._loop.create_task, self._execute(cell))
        self._router.attach(cell.ledger)
        cell.task.add_done_callback(functools.partial(self._finish, cell))

    def _on_yield(self, execution_id):
        """The host accepted a wait of execution_id: its cell's turn is over. A wait awaited
        by another task of the cell ends the cell too."""
        cell = self._active
        if cell is None or cell.id != execution_id:
            return
        cell.yielded = True
        if cell.task is not None and asyncio.current_task(self._loop) is not cell.task:
            cell.task.cancel()

    async def _execute(self, cell):
        """The cell's task: run the cell and return its (status, error)."""
        if cell.interrupted:  # before it started
            return wire.STATUS_INTERRUPTED, "KeyboardInterrupt"
        try:
            text = await self._interpreter.run(cell.code, cell.id)
            if cell.yielded:  # the wait's Yielded was caught: the turn is over all the same
                return wire.STATUS_YIELDED, None
            if text is not None:
                self._router.emit(wire.STREAM_RESULT, text)
            return wire.STATUS_OK, None
        except BaseException as exc:
            if cell.yielded:  # Yielded, or the cancellation of a cell whose task waited
                return wire.STATUS_YIELDED, None
            if cell.interrupted and isinstance(exc, asyncio.CancelledError):
                return wire.STATUS_INTERRUPTED, "KeyboardInterrupt"
            interrupted = isinstance(exc, KeyboardInterrupt)
            status = wire.STATUS_INTERRUPTED if interrupted else wire.STATUS_ERROR
            return status, cap_error_text(format_exception(exc))

    def _finish(self, cell, task):
        if task.cancelled() and cell.yielded:
            self._complete(cell, wire.STATUS_YIELDED, None)
        elif task.cancelled():  # cancelled before its first step
            self._complete(cell, wire.STATUS_INTERRUPTED, "KeyboardInterrupt")
        elif task.exception() is not None:  # raised while reporting an exception
            exc = task.exception()
            interrupted = isinstance(exc, KeyboardInterrupt)
            status = wire.STATUS_INTERRUPTED if interrupted else wire.STATUS_ERROR
            self._complete(cell, status, type(exc).__name__)
        else:
            self._complete(cell, *task.result())

    def _complete(self, cell, status, error):
        self._router.detach()
        self._active = None
        self._send(wire.COMPLETED, {"id": cell.id, "result": {
            "kind": wire.RESULT_CELL, "status": status, "output": cell.ledger.records(),
            "truncated_bytes": cell.ledger.truncated_bytes, "error": error}})

    # --- Writing frames ------------------------------------------------------------------

    def _send_failed(self, operation_id, error):
        self._send(wire.COMPLETED, {"id": operation_id,
                                    "result": {"kind": wire.RESULT_FAILED, "error": error}})

    def _send(self, kind, fields):
        self._write(self._frame(kind, fields))

    def _post(self, kind, fields):
        """Send a message for cell code: encode it now, write it outside any task step."""
        self._loop.call_soon(self._write, self._frame(kind, fields))

    def _frame(self, kind, fields):
        return wire.pack_frame(wire.encode(self._session_id, self._generation, kind, fields))

    def _write(self, data):
        """Write one whole frame; SIGINT waits on the main thread, so no frame is left partial."""
        main = threading.get_ident() == self._main_thread
        try:
            with self._write_lock:
                try:
                    if main:
                        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)
                    self._sock.sendall(data)
                finally:
                    if main:
                        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGINT)
        except OSError as err:
            _fail(f"cannot write to the host: {err}")
