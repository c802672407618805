"""The workbench worker process: a persistent Python namespace that a kiln host drives.

The host starts it as::

    python3 -I -S -c LAUNCHER <pkgroot> - kiln.worker --socket <path> --session <id>
        --generation <id> [--skills <path>] [--tools <path>] [--status-fd <fd>]

A worker forked from a zygote (kiln.zygote) is handed descriptors instead:
``--socket-fd N``, its end of a connected socket pair, and ``--skills-fd N`` and
``--tools-fd N``, pipes it reads to their end.

with LAUNCHER the launcher of python/embed.go (no gate: "-"), which puts <pkgroot> first
on sys.path and calls ``kiln.worker.main`` with the arguments after the module, and
writes the startup token, in hex, as the first line on its stdin. The worker reads and
removes the skills file, if one is given, making each skill importable as
``kiln.skills.<id>``, and the tools file, if one is given, making each tool callable as
``tools.<namespace>.<name>`` (see kiln.tools); then it connects to the socket and says
hello, echoing the skills' revision. Given ``--status-fd``, as init of its PID namespace
it first forks: the worker goes on in the child, and kiln.nsinit's init stays in front of it,
reaping the orphans of the cells' processes.

One thread does everything: it reads the host's frames, runs the cells and writes the
replies, so a cell's round trip crosses no thread. A cell that awaits at top level runs as
a task on one asyncio event loop, kept for good so that background tasks survive between
cells. The loop, and asyncio itself, is made only when a cell first needs it; while the loop
has work, the worker reads the socket through it. Any other cell runs directly, with the
loop, once it exists, as the running loop, so ``asyncio.create_task`` works in it too.

An interrupt is the host's interrupt frame followed by SIGINT to this process, repeated
until the cell ends. The SIGINT handler reads the frames waiting on the socket; if one
interrupts the running cell, KeyboardInterrupt is raised in the cell's code (or in the
background task holding the loop), or, when the cell is a task suspended at an await, the
task is cancelled. Protocol errors end the process at once, non-zero.
"""
# The C modules under socket and signal are imported directly: their Python wrappers would
# add milliseconds to every start, building enums the worker has no use for.
import _signal
import _socket
import builtins
import collections
import contextvars
import functools
import os
import select
import sys
import threading
import time
import types

from kiln import display, nsinit, skillset, startup, wire
from kiln import tools as toolset
from kiln.cells import Interpreter, complete_names, exception_parts, format_exception
from kiln.output import CaptureStream, Ledger, OutputRouter, cap_error_text
from kiln.runtime import EXECUTION_ID, InputStream, Runtime


_RECEIVE_SIZE = 1 << 16

# The address space a cell's code may not use under a memory limit: mapped, untouched,
# while the cell's code runs, and unmapped the moment it ends, so that the worker has room
# to report a MemoryError, read the next cell and compile it however full the namespace is.
_MEMORY_RESERVE = 16 << 20
_OPTIONS = ("--session", "--generation")


def main(argv):
    """Run a workbench worker; argv is ``--socket PATH --session ID --generation ID``.

    Never returns: the worker ends the process when the host says so or goes away.
    """
    options = startup.parse_options("worker", argv, _OPTIONS,
                                    ("--socket", "--socket-fd", "--skills", "--skills-fd", "--tools", "--tools-fd",
                                     "--memory", "--cpu-seconds", "--status-fd"),
                                    ("--session", "--generation"))
    if "--status-fd" in options:
        nsinit.front(int(options["--status-fd"]))  # the init stays behind, as PID 1
    session_id, generation = options["--session"], options["--generation"]
    token = startup.read_token("worker")
    startup.seal_stdin()
    cpu_seconds = startup.limits(options)
    revision = None
    skills = startup.handed("worker", options, "--skills")
    if skills is not None:
        revision = skillset.load(skills)
    sock = startup.connect("worker", options)  # once the skills are read, as the host expects
    worker = Worker(sock, session_id, generation, startup.handed("worker", options, "--tools"))
    if cpu_seconds:
        worker.limit_cpu(cpu_seconds)
    if "--memory" in options:
        worker.keep_memory(_MEMORY_RESERVE)
    worker.serve(token, revision)


def _diagnose(text):
    startup.diagnose("worker", text)


def _fail(reason):
    startup.fail("worker", reason)


def _wake():
    """Do nothing: scheduled from the SIGINT handler, it wakes a loop idle in its selector."""


def _needs_loop(compiled, source):
    """Report whether a cell needs the event loop: it awaits, or it may use asyncio."""
    return compiled.awaits or "asyncio" in sys.modules or "asyncio" in source


class _Cell:
    """One execute, from its arrival to its completed message."""

    __slots__ = ("id", "code", "ledger", "task", "running", "interrupted", "signalled",
                 "yielded", "displays")

    def __init__(self, cell_id, code):
        self.id = cell_id
        self.code = code
        self.ledger = Ledger()
        self.task = None  # the cell's task, for a cell that awaits
        self.running = False  # the cell's own code is on the stack, run directly
        self.interrupted = False  # asked to stop: a cell that has not run yet will not
        self.signalled = False  # the latest interrupt has acted
        self.yielded = False  # the host accepted a wait of this cell: its turn is over
        self.displays = None  # its Displays, made at its first display


class _Completion:
    """One complete, from its arrival to its completed message: run from the main loop,
    as a cell is, so that an interrupt can stop it (a property or a __dir__ that the
    completer evaluates may take any time)."""

    __slots__ = ("id", "text", "running", "interrupted", "signalled")

    def __init__(self, completion_id, text):
        self.id = completion_id
        self.text = text
        self.running = False
        self.interrupted = False
        self.signalled = False


class Worker:
    """Serves one host connection: reads its frames, runs its cells, answers it."""

    def __init__(self, sock, session_id, generation, tools=None):
        self._sock = sock
        self._session_id = session_id
        self._generation = generation
        self._frames = wire.FrameSplitter()
        self._decoder = wire.Decoder(session_id, generation)
        # What was read and awaits the main loop: cells to start, replies to deliver.
        self._queue = collections.deque()
        # The _Cell accepted and not yet completed: set when its execute is read, cleared
        # just before its completed message is written.
        self._active = None
        self._completing = None  # the _Completion accepted and not yet answered
        # Cells the host sent while one ran: it took a completion that cell code forged
        # for the worker's. Each runs in turn once the one before has completed.
        self._waiting = collections.deque()
        self._io = False  # inside a socket read or write: SIGINT waits for its end
        self._forked = False  # this process is a child cell code forked from the worker
        self._sigint_pending = False
        self._asyncio = None  # the asyncio module, once a cell needs the loop
        self._loop = None
        self._loop_running = False
        # Frames are written by the main thread and by the output router's flushes, which
        # may run on a thread of the cell's or on the router's timer: one at a time.
        self._write_lock = threading.Lock()
        self._writer = None  # the thread inside a write
        self._router = OutputRouter(self._stream)
        self._stdout = CaptureStream(self._router, wire.STREAM_STDOUT, 1)
        self._cpu = None  # the cells' CPU limit, if any (see limit_cpu)
        self._reserve_size = 0  # see keep_memory
        self._reserve = None
        self._runtime = Runtime(self._send_request, self._on_yield, self._wait_reply)
        self._main = types.ModuleType("__main__")
        self._main.runtime = self._runtime
        self._main.tools = toolset.load(self._runtime, tools)
        self._interpreter = Interpreter(self._main.__dict__)

    def serve(self, token, revision=None):
        """Take over the process's __main__, standard streams and SIGINT, say hello with
        token and the skills revision, and serve forever. The host may interrupt as soon
        as it has the hello."""
        sys.modules["__main__"] = self._main
        sys.stdout = self._stdout
        sys.stderr = CaptureStream(self._router, wire.STREAM_STDERR, 2)
        sys.stdin = InputStream(self._runtime)
        builtins.input = self._runtime.input
        builtins.display = self.display
        display.use_matplotlib_backend()
        _signal.signal(_signal.SIGINT, self._on_sigint)
        os.register_at_fork(after_in_child=self._after_fork)
        self._send(wire.HELLO, {"token": token, "role": wire.ROLE_WORKBENCH, "revision": revision,
                                "slots": []})
        while True:
            try:
                if self._queue:
                    self._drain()
                elif self._loop is not None and self._loop_busy():
                    self._run_loop()
                else:
                    self._receive(block=True)
            except KeyboardInterrupt:  # it hit a background task, not the cell: stop the cell
                cell = self._active
                if cell is not None and cell.task is not None and not cell.task.done():
                    cell.interrupted = True
                    cell.task.cancel()
            except SystemExit:
                _diagnose("a background task raised SystemExit; the worker serves on")

    # --- Reading -------------------------------------------------------------------------

    def _receive(self, block):
        """Read what the socket holds (waiting for something if block) and accept each
        whole frame in it; then act on an interrupt of the running cell."""
        outer, self._io = self._io, True
        try:
            if self._queue or self._sigint_pending:
                block = False  # the SIGINT handler read frames just before: serve them first
            try:
                data = self._recv_waiting() if block else self._recv_available()
            except OSError as err:
                _fail(f"cannot read from the host: {err}")
            if data == b"":
                if self._frames.partial():
                    _fail("the host closed the connection inside a frame")
                _fail("the host closed the connection")
            if data:
                self._accept_frames(data)
        finally:
            self._io = outer
        if not outer:
            self._after_io()
            self._act_on_interrupt()

    def _recv_available(self):
        """Receive all the socket holds now, without waiting: None when it holds nothing."""
        chunks = []
        while True:
            try:
                chunk = self._sock.recv(_RECEIVE_SIZE, _socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            chunks.append(chunk)
            if len(chunk) < _RECEIVE_SIZE:
                break
        return b"".join(chunks) if chunks else None

    def _recv_waiting(self):
        """Receive something, waiting for it. Once the event loop exists, a callback another
        thread schedules on it while the worker waits ends the wait too, with None, so that
        the loop runs it."""
        if self._loop is not None:
            poller = select.poll()
            poller.register(self._sock.fileno(), select.POLLIN)
            poller.register(self._loop._ssock.fileno(), select.POLLIN)  # its wake-up pipe
            if not any(fd == self._sock.fileno() for fd, _ in poller.poll()):
                return None
        return self._sock.recv(_RECEIVE_SIZE)

    def _accept_frames(self, data):
        """Accept each whole frame of data, what was read, after what came before it."""
        frames = self._frames
        try:
            frames.feed(data)
            while (payload := frames.next()) is not None:
                self._accept(*self._decoder.decode(payload))
        except (wire.FrameError, wire.DecodeError) as err:
            _fail(f"cannot read from the host: {type(err).__name__}: {err}")

    def _accept(self, kind, message):
        """Take one message in arrival order; what needs the main loop is queued for it."""
        if kind == wire.EXECUTE:
            if self._active is not None:
                self._waiting.append(_Cell(message["id"], message["code"]))
                return
            self._active = cell = _Cell(message["id"], message["code"])
            self._queue.append(cell)
        elif kind == wire.INTERRUPT:
            cell = self._active
            if cell is not None and cell.id == message["id"]:
                cell.interrupted = True
                cell.signalled = False  # each interrupt stops the cell once more
            for waiting in self._waiting:
                if waiting.id == message["id"]:
                    waiting.interrupted = True  # it ends so as it starts
            completion = self._completing
            if completion is not None and completion.id == message["id"]:
                completion.interrupted = True
        elif kind == wire.HOST_REPLY:
            self._queue.append((message["id"], message["execution_id"], message["reply"]))
        elif kind == wire.INVOKE:
            self._send_failed(message["id"], "invoke is for the hooks role; this is a workbench")
        elif kind == wire.COMPLETE:
            if self._active is not None or self._completing is not None:
                self._send_failed(message["id"], "a cell is running; completion is for an idle workbench")
                return
            self._completing = _Completion(message["id"], message["text"])
            self._queue.append(self._completing)
        elif kind == wire.SHUTDOWN:
            for stream in (sys.__stdout__, sys.__stderr__):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(0)
        else:
            _fail(f"the host sent a {kind} message")

    def _wait_reply(self, request_id, execution_id):
        """Block until the reply to request_id of execution_id comes, accepting the frames
        that come meanwhile, and return it. While it waits, SIGINT leaves what is on the
        socket to this wait, which acts on an interrupt as soon as it reads it."""
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        while True:
            for index, item in enumerate(tuple(self._queue)):
                if type(item) is tuple and item[0] == request_id and item[1] == execution_id:
                    del self._queue[index]
                    return item[2]
            outer, self._io = self._io, True
            try:
                poller.poll()
            finally:
                self._io = outer
            self._receive(block=False)

    def _drain(self):
        """Start the queued cells and deliver the queued replies, in arrival order."""
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, _Cell):
                self._start(item)
            elif isinstance(item, _Completion):
                self._complete_names(item)
            else:
                self._runtime.deliver(*item)

    # --- Interrupts ----------------------------------------------------------------------

    def _on_sigint(self, signum, frame):
        if self._io:  # a frame is half read or half written: act once it is whole
            self._sigint_pending = True
            return
        try:
            self._receive(block=False)  # the host wrote its interrupt frame around its signal
        finally:
            if self._queue and self._loop_running:
                self._loop.call_soon_threadsafe(self._drain)

    def _after_io(self):
        if self._sigint_pending:
            self._sigint_pending = False
            self._on_sigint(_signal.SIGINT, None)

    def _act_on_interrupt(self):
        """Stop the active cell, or completion, if an interrupt has asked it to and has
        not yet acted.

        SIGINT from anyone but the host, with no interrupt frame, changes nothing.
        """
        completion = self._completing
        if completion is not None and completion.interrupted and completion.running and not completion.signalled:
            completion.signalled = True
            raise KeyboardInterrupt  # in the completer's lookups
        cell = self._active
        if cell is None or not cell.interrupted or cell.signalled:
            return
        if cell.task is not None and cell.task.done():
            return
        current = self._asyncio.current_task(self._loop) if self._loop_running else None
        if cell.running or current is not None:
            cell.signalled = True
            if current is not None and cell.task is not None and current is not cell.task:
                cell.task.cancel()  # a task holding the loop may swallow what it is raised
            raise KeyboardInterrupt  # in the cell's code, or in a task holding the loop
        if cell.task is not None:  # suspended at an await: its next step is its end
            cell.signalled = True
            cell.task.cancel()
            if self._loop_running:
                self._loop.call_soon_threadsafe(_wake)
        # A cell not yet running acts on the interrupt itself as it starts.

    # --- The event loop ------------------------------------------------------------------

    def _ensure_loop(self):
        if self._loop is None:
            import asyncio  # here, not above: a worker whose cells never await does not load it

            self._asyncio = asyncio
            self._loop = asyncio.SelectorEventLoop()
            asyncio.set_event_loop(self._loop)
            self._runtime.loop = self._loop

    def _loop_busy(self):
        """Report whether the loop has anything to do: tasks, callbacks, timers, or files
        other than its own wake-up pipe and the host's socket.

        Reads BaseEventLoop's ready and scheduled queues, which asyncio does not publish.
        """
        loop = self._loop
        own = 2 if self._loop_running else 1
        return bool(loop._ready or loop._scheduled or self._asyncio.all_tasks(loop)
                    or len(loop._selector.get_map()) > own)

    def _run_loop(self):
        """Run the loop, reading the socket through it, until it has nothing left to do."""
        loop, fd = self._loop, self._sock.fileno()
        loop.add_reader(fd, self._on_readable)
        self._loop_running = True
        if self._queue:
            loop.call_soon(self._drain)
        try:
            loop.run_forever()
        finally:
            self._loop_running = False
            loop.remove_reader(fd)

    def _on_readable(self):
        self._receive(block=False)
        self._drain()
        self._leave_loop_if_idle()

    def _leave_loop_if_idle(self):
        if self._loop_running and not self._loop_busy():
            self._loop.stop()

    # --- Cells ---------------------------------------------------------------------------

    def limit_cpu(self, seconds):
        """Let each cell use at most seconds of CPU time."""
        from kiln.limits import CellCPU  # here, not above: most workbenches have no limit

        self._cpu = CellCPU(seconds, self._in_cell)

    def keep_memory(self, size):
        """Keep size bytes of the address space from each cell's code, for the worker's own
        work after it (see _MEMORY_RESERVE)."""
        self._reserve_size = size

    def _hold_reserve(self):
        if self._reserve_size and self._reserve is None:
            import mmap  # here, not above: most workbenches have no memory limit

            try:
                self._reserve = mmap.mmap(-1, self._reserve_size)
            except OSError:  # the namespace holds it all: the cell runs without one
                pass

    def _release_reserve(self):
        if self._reserve is not None:
            self._reserve.close()
            self._reserve = None

    def _in_cell(self):
        """Report whether the active cell's own code is what runs now."""
        cell = self._active
        if cell is None:
            return False
        return cell.running or (cell.task is not None and self._loop_running
                                and self._asyncio.current_task(self._loop) is cell.task)

    def _start(self, cell):
        if cell.interrupted:  # before it started
            self._complete(cell, wire.STATUS_INTERRUPTED, "KeyboardInterrupt")
            return
        self._router.attach(cell.ledger, cell.id)
        if self._cpu is not None:
            self._cpu.arm()
        try:
            compiled = self._interpreter.compile(cell.code, cell.id)
        except Exception as exc:  # SyntaxError, and ValueError for a null byte
            self._complete(cell, *_failure(exc))
            return
        if _needs_loop(compiled, cell.code):
            self._ensure_loop()
        context = contextvars.Context()
        context.run(EXECUTION_ID.set, cell.id)
        if compiled.awaits:
            cell.task = context.run(self._loop.create_task, self._run_task(cell, compiled))
            cell.task.add_done_callback(functools.partial(self._finish, cell))
        else:
            context.run(self._run_directly, cell, compiled)

    def _run_directly(self, cell, compiled):
        """Run a cell that does not await, here and now, and complete it."""
        lend_loop = self._loop is not None and not self._loop_running
        if lend_loop:
            self._asyncio.events._set_running_loop(self._loop)
        try:
            ending = self._evaluate(cell, compiled)
        except KeyboardInterrupt:  # it landed just around the cell's code
            ending = wire.STATUS_INTERRUPTED, "KeyboardInterrupt"
        finally:
            if lend_loop:
                self._asyncio.events._set_running_loop(None)
        self._complete(cell, *ending)

    def _evaluate(self, cell, compiled):
        cell.running = True
        self._hold_reserve()
        try:
            if cell.interrupted and not cell.signalled:  # it came while the cell was prepared
                cell.signalled = True
                raise KeyboardInterrupt
            text = self._interpreter.run(compiled)
            if text is not None:
                # The value's display methods are the cell's code: they run inside it, to
                # be interrupted, limited, and reported when they raise.
                self._show_result(cell, text)
            cell.running = False
        except BaseException as exc:
            cell.running = False
            self._release_reserve()
            return _failure(exc)
        self._release_reserve()
        if text is not None:
            self._router.emit(wire.STREAM_RESULT, text)
        return wire.STATUS_OK, None

    async def _run_task(self, cell, compiled):
        """The task of a cell that awaits: run it and return its (status, error)."""
        if cell.interrupted:  # before its first step
            return wire.STATUS_INTERRUPTED, "KeyboardInterrupt"
        self._hold_reserve()
        try:
            text = await self._interpreter.run_async(compiled)
            self._release_reserve()
            if cell.yielded:  # the wait's Yielded was caught: the turn is over all the same
                return wire.STATUS_YIELDED, None
            if text is not None:
                self._show_result(cell, text)
                self._router.emit(wire.STREAM_RESULT, text)
            return wire.STATUS_OK, None
        except BaseException as exc:
            self._release_reserve()
            if cell.yielded:  # Yielded, or the cancellation of a cell whose task waited
                return wire.STATUS_YIELDED, None
            if cell.interrupted and isinstance(exc, self._asyncio.CancelledError):
                return wire.STATUS_INTERRUPTED, "KeyboardInterrupt"
            return _failure(exc)

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

    def _complete_names(self, completion):
        """Answer a complete: its matches, or, when interrupted, a failure."""
        try:
            if completion.interrupted:
                raise KeyboardInterrupt
            completion.running = True  # from here an interrupt raises, until it is False
            matches = complete_names(self._main.__dict__, completion.text)
            completion.running = False
            result = {"kind": wire.RESULT_COMPLETION, "matches": matches}
        except KeyboardInterrupt:
            completion.running = False
            result = {"kind": wire.RESULT_FAILED, "error": "the completion was interrupted"}
        self._completing = None
        self._send(wire.COMPLETED, {"id": completion.id, "result": result})

    def display(self, *objs):
        """Show each object's rich form (its MIME bundle) in the running cell's output."""
        cell = self._active
        if cell is None or self._forked:
            for obj in objs:
                print(repr(obj))
            return
        for obj in objs:
            self._show(cell, display.bundle(obj))

    def _show(self, cell, data):
        if cell.displays is None:
            cell.displays = display.Displays(functools.partial(self._display_frame, cell.id),
                                             functools.partial(self._router.show, cell.id),
                                             self._stdout.write)
        cell.displays.show(data)

    def _display_frame(self, cell_id, data, dropped):
        """The frame of a display of cell_id, or None when it is over one frame."""
        payload = wire.encode(self._session_id, self._generation, wire.DISPLAY,
                              {"execution_id": cell_id, "data": data, "dropped": dropped})
        return wire.pack_frame(payload) if len(payload) <= wire.MAX_FRAME_SIZE else None

    def _show_result(self, cell, text):
        """Display the final value's bundle when it says more than its text, its repr."""
        data = display.bundle(self._main.__dict__.get("_"), text)
        if display.rich(data):
            self._show(cell, data)

    def _on_yield(self, execution_id):
        """The host accepted a wait of execution_id: its cell's turn is over. A wait awaited
        by another task of the cell ends the cell too."""
        cell = self._active
        if cell is None or cell.id != execution_id:
            return
        cell.yielded = True
        if cell.task is not None and self._asyncio.current_task(self._loop) is not cell.task:
            cell.task.cancel()

    def _after_fork(self):
        """In a child that cell code forked: it is not the worker. It never speaks on the
        host's socket, and it ends when the cell's code ends in it, instead of serving."""
        self._forked = True
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        try:
            self._sock.close()
        except OSError:
            pass
        # What it prints goes to the real descriptors, at once: into the host's raw tails
        # of the cell running then, whether the child flushes before it ends or not.
        sys.stdout = _raw_stream(1)
        sys.stderr = _raw_stream(2)

    def _complete(self, cell, status, error, exception=None):
        if self._cpu is not None:
            self._cpu.disarm()
        if self._forked:
            for stream in (sys.__stdout__, sys.__stderr__):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(0 if status == wire.STATUS_OK else 1)
        self._router.detach()  # what was not yet streamed goes now, before the completion
        self._active = None
        result = {"kind": wire.RESULT_CELL, "status": status, "output": cell.ledger.records(),
                  "truncated_bytes": cell.ledger.truncated_bytes, "error": error}
        if exception is not None:
            result["exception"] = exception
        payload = wire.encode(self._session_id, self._generation, wire.COMPLETED,
                              {"id": cell.id, "result": result})
        self._write(wire.pack_frame(payload))
        if self._waiting:
            self._active = self._waiting.popleft()
            self._queue.append(self._active)
            if self._loop_running:
                self._loop.call_soon(self._drain)
        if self._loop_running:
            self._leave_loop_if_idle()

    # --- Writing frames ------------------------------------------------------------------

    def _send_failed(self, operation_id, error):
        self._send(wire.COMPLETED, {"id": operation_id,
                                    "result": {"kind": wire.RESULT_FAILED, "error": error}})

    def _send_request(self, request_id, execution_id, request):
        """Send a host_request for cell code; raise if it cannot be encoded."""
        self._write(wire.pack_frame(wire.encode_host_request(
            self._session_id, self._generation, request_id, execution_id, request)))

    def _send(self, kind, fields):
        self._write(wire.pack_frame(wire.encode(self._session_id, self._generation, kind, fields)))

    def _write(self, data):
        """Write one whole frame; SIGINT acts once it is written, so no frame is left partial."""
        outer, self._io = self._io, True
        try:
            self._write_locked(data)
        finally:
            self._io = outer
        if not outer:
            self._after_io()

    def _write_locked(self, data):
        if self._forked:
            raise RuntimeError("a process forked from the worker cannot speak to the host")
        with self._write_lock:
            self._writer = threading.get_ident()
            try:
                self._sock.sendall(data)
            except OSError as err:
                _fail(f"cannot write to the host: {err}")
            finally:
                self._writer = None

    def _stream(self, take):
        """The output router's sender: write the runs take() hands over, text as output
        frames and displays as the frames made for them, all in one write; return False,
        taking nothing, when this thread is inside a write (a signal handler that printed)."""
        if self._writer == threading.get_ident():
            return False
        if self._forked:  # the parent's, not sent yet: the parent sends it
            take()
            return True
        main = threading.get_ident() == threading.main_thread().ident
        outer = self._io
        if main:
            self._io = True  # SIGINT waits: what take() hands over is sent, not lost
        try:
            cell_id, runs = take()
            data = b"".join(body if stream == wire.STREAM_DISPLAY else wire.pack_frame(wire.encode(
                self._session_id, self._generation, wire.OUTPUT,
                {"execution_id": cell_id, "stream": stream, "text": body})) for stream, body in runs)
            self._write_locked(data)
        finally:
            if main:
                self._io = outer
        if main and not outer:
            self._after_io()
        return True


def _raw_stream(fd):
    """A text stream that writes each write through to descriptor fd, as UTF-8."""
    import io  # here, not above: only a forked child needs it

    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8", errors="replace",
                            line_buffering=True, write_through=True)


def _failure(exc):
    """Return the (status, error, exception) of a cell that raised exc."""
    status = wire.STATUS_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else wire.STATUS_ERROR
    exception = exception_parts(exc)
    return status, exception["traceback"], exception
