"""The program child, from boot to done: it boots (limits, bindings, boot-ack),
waits for run, runs the program (on an asyncio event loop if it can suspend),
and sends exactly one done (docs/programs.md)."""

import builtins as _builtins_module

__builtins__ = dict(vars(_builtins_module))

import _signal
import os as _os
import resource as _resource
import sys as _sys

from kiln import jsonplain as _jp
from kiln import program_bridge
from kiln.program_bridge import Bridge, make_error_class, make_namespace
from kiln.program_channel import IDLE, PROTOCOL_FD, Channel, frame as _frame, frame_cap
from kiln.program_compile import STAR_HELPER, compile_program, star_importer
from kiln.program_ledger import Ledger, LogStream
from kiln.program_limits import LimitError, apply as apply_limits, cpu_exhausted, end_by_cpu_limit
from kiln.program_render import Renderer, cap, class_name

_exit = _os._exit
_open = _os.open
_dup2 = _os.dup2
_close = _os.close
_mkdir = _os.mkdir
_urandom = _os.urandom
_join = _os.path.join
_environ = _os.environ
_closerange = _os.closerange
# the most fds a process can have open here: closerange uses close_range(2) where the
# kernel has it, so the span costs nothing
_MAX_FDS = _resource.getrlimit(_resource.RLIMIT_NOFILE)[1]
if _MAX_FDS == _resource.RLIM_INFINITY:
    _MAX_FDS = 1 << 20
_getpid = _os.getpid
_devnull = _os.devnull
_O_RDONLY = _os.O_RDONLY
# the raw _signal functions: signal.getsignal's enum conversion costs
# microseconds a signal on slow machines, and completion looks at all of them
_signal_set = _signal.signal
_signal_get = _signal.getsignal
_SIGNALS = tuple(sorted(_signal.valid_signals()))
_sigmask = _signal.pthread_sigmask
_SIG_UNBLOCK = _signal.SIG_UNBLOCK
_SIG_DFL = _signal.SIG_DFL
_SIG_IGN = _signal.SIG_IGN
_SIGXCPU = _signal.SIGXCPU
_ModuleType = type(_sys)
_modules = _sys.modules
_settrace = _sys.settrace
_setprofile = _sys.setprofile
_setrecursionlimit = _sys.setrecursionlimit
_RECURSION_LIMIT = _sys.getrecursionlimit()
_builtins_dict = _builtins_module.__dict__
_builtins_snapshot = dict(_builtins_dict)
_encode_checked = _jp.encode_checked
_string_text = _jp.string_text
_OK = _jp.OK
_OVER_BUDGET = _jp.OVER_BUDGET

_BALLAST_BYTES = 1 << 20  # freed at completion so a program that ran out of memory can still be reported
_WARM_AFTER = 500  # ms a booted child waits for run before it takes itself for a pool's and warms up

#: The done frame sent when nothing better can be.
UNRENDERABLE = b'{"type":"done","error":{"kind":"exception","message":"<unrenderable>"}}\n'


# --- asyncio -------------------------------------------------------------------------

# Importing asyncio costs a cold child more than everything else it does put
# together; a child imports it only for a program that can suspend (an await of
# its own), when run comes, before the program's code starts, or while it waits
# for run in a pool (Child.wait_for_run). A program that cannot suspend runs
# without an event loop.
_new_event_loop = _set_event_loop = None


def _load_asyncio():
    """Import asyncio and bind what the child uses of it; idempotent."""
    global _new_event_loop, _set_event_loop
    if _new_event_loop is None:
        import asyncio

        program_bridge.bind_asyncio(asyncio)
        _set_event_loop = asyncio.set_event_loop
        _new_event_loop = asyncio.new_event_loop


# Modules asyncio imports (CPython 3.11's list; one a version lacks is skipped),
# leaves first, so that a child warming up imports them one at a time and
# notices run in between: a run that comes meanwhile waits for one of them.
_ASYNCIO_PARTS = (
    "tokenize", "linecache", "textwrap", "traceback", "weakref", "string",
    "threading", "logging", "concurrent.futures", "heapq", "selectors", "socket",
    "locale", "signal", "subprocess", "_ssl", "base64", "ssl", "dis", "inspect",
    "contextvars", "_asyncio", "typing",
)


# --- boot ------------------------------------------------------------------------------


class BootError(Exception):
    """The host's boot or run frame is not well formed."""


def _int_field(frame, name, minimum):
    v = frame.get(name)
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is not int or v < minimum:
        raise BootError("bootstrap: invalid boot frame: %s must be an integer >= %d" % (name, minimum))
    return v


def _namespaces(frame):
    spaces = frame.get("namespaces")
    if type(spaces) is not list:
        raise BootError("bootstrap: invalid boot frame: namespaces must be an array")
    out = []
    for ns in spaces:
        if type(ns) is not dict or type(ns.get("global")) is not str or type(ns.get("names")) is not list:
            raise BootError("bootstrap: invalid boot frame: a namespace needs a string global and an array of names")
        names = ns["names"]
        if not all(type(n) is str for n in names):
            raise BootError("bootstrap: invalid boot frame: binding names must be strings")
        ec = ns.get("errorClass")
        if ec is not None:
            if type(ec) is not dict or type(ec.get("name")) is not str or type(ec.get("memberNameProperty")) is not str:
                raise BootError("bootstrap: invalid boot frame: errorClass needs a string name and memberNameProperty")
            prop = ec["memberNameProperty"]
            if not prop or prop.startswith("__") or hasattr(BaseException, prop):
                raise BootError("bootstrap: invalid boot frame: memberNameProperty %r is not usable" % prop)
            ec = (ec["name"], prop)
        out.append((ns["global"], names, ec))
    return out


# --- the child ----------------------------------------------------------------------------


class Child:
    """The program child, from boot to done."""

    def __init__(self):
        self.channel = Channel(PROTOCOL_FD)
        self.pid = _getpid()
        self.max_value_bytes = 0
        self.cap = None  # what error messages are cut to, once boot said
        self.cpu_soft = None
        self.ledger = None
        self.raw_streams = (_sys.stdout, _sys.stderr)
        self.globals = None
        self.ballast = None
        self.lines = []
        self.loop = None  # the event loop, made for the run or while warming up
        self.warmed = 0  # the steps of warming up taken

    # -- completion --

    def complete(self, ok, value):
        """Send done for the program's outcome and exit; never returns.

        Runs right where the program's coroutine ended. Anything the program left behind that gets in
        the way (a trace function, a signal handler that raises, a tiny
        recursion limit) is undone and the attempt made again."""
        if _getpid() != self.pid:
            _exit(0)  # a fork of the program finishing it: the run is not its to end
        for _ in range(100):
            try:
                _settrace(None)
                _setprofile(None)
                _setrecursionlimit(_RECURSION_LIMIT)
                if ok:
                    self.finish_value(value)
                else:
                    self.finish_exception(value)
            except BaseException:
                pass
        try:
            self.channel.final(UNRENDERABLE)
        finally:
            _exit(0)

    def finish_value(self, value):
        """Send done for a completion value; never returns."""
        self.settle_process()
        self.ledger_finish()
        if value is None:
            self.send_done(b'{"type":"done"}\n')
        try:
            status, detail = _encode_checked(value, self.max_value_bytes)
        except MemoryError:
            self.ballast = None
            self.send_error("exception", "MemoryError: out of memory while checking the completion value")
        except BaseException as e:  # pragma: no cover - the walk runs no model code
            self.send_error("exception", "bootstrap: checking the completion value failed: %s" % type(e).__name__)
        if status == _OK:
            self.send_done(_frame('{"type":"done","value":%s}' % detail))
        elif status == _OVER_BUDGET:
            self.send_error("output-limit", "completion value exceeded %d bytes" % self.max_value_bytes)
        else:
            self.send_error("invalid-output", "completion value is not lossless JSON: %s" % detail)

    def finish_exception(self, exc):
        """Send done for an exception the program raised; never returns."""
        self.settle_process()
        self.ledger_finish()
        self.ballast = None
        message = None
        try:
            message = Renderer(self.lines).render(exc)
        except MemoryError:
            if self.globals is not None:
                self.globals.clear()  # a program that ran out of memory: let its objects go
            try:
                message = Renderer(self.lines).render(exc)
            except BaseException:
                message = None
        except BaseException:
            message = None
        if message is None:
            try:
                message = "%s: <diagnostic rendering failed>" % class_name(type(exc))
            except BaseException:
                self.send_done(UNRENDERABLE)
        self.send_error("exception", message)

    def send_error(self, kind, message):
        """Send done with an error; never returns."""
        try:
            if self.cap is not None:
                message = cap(message, self.cap)
            data = self.error_frame(kind, message)
            room = self.channel.cap
            if room is not None and len(data) - 1 > room:
                # escapes (6 bytes for a control character) took it past the frame
                # cap: cut it to what fits however it escapes
                overhead = len(self.error_frame(kind, "")) - 1
                data = self.error_frame(kind, cap(message, (room - overhead) // 6))
        except BaseException:
            data = UNRENDERABLE
        self.send_done(data)

    @staticmethod
    def error_frame(kind, message):
        return _frame('{"type":"done","error":{"kind":"%s","message":%s}}' % (kind, _string_text(message)[0]))

    def send_done(self, data):
        self.flush_raw()
        self.channel.final(data)
        self.flush_raw()
        _exit(0)

    def flush_raw(self):
        for stream in self.raw_streams:
            try:
                if stream is not None:
                    stream.flush()
            except BaseException:
                pass

    def ledger_finish(self):
        if self.ledger is not None:
            try:
                self.ledger.finish()
            except BaseException:
                self.ledger.stopped = True

    def settle_process(self):
        """Take back what the program may have changed, then the CPU re-check."""
        _settrace(None)
        _setprofile(None)
        _builtins_dict.update(_builtins_snapshot)
        for sig in _SIGNALS:
            try:
                if sig == _SIGXCPU:
                    _signal_set(sig, _SIG_DFL)
                elif callable(_signal_get(sig)):  # a Python handler: not SIG_DFL, SIG_IGN or None
                    _signal_set(sig, _SIG_IGN)
            except (OSError, ValueError, RuntimeError, TypeError):
                pass
        try:
            _sigmask(_SIG_UNBLOCK, {_SIGXCPU})
        except (OSError, ValueError):
            pass
        self.cpu_recheck()

    def cpu_recheck(self):
        if cpu_exhausted(self.cpu_soft):
            self.flush_raw()
            end_by_cpu_limit()

    # -- the run --

    def boot(self):
        frame = self.channel.read_frame()
        if frame is None or frame.get("type") != "boot":
            raise BootError("bootstrap: the first frame was not a valid boot frame")
        cpu = _int_field(frame, "cpuSeconds", 1)
        address_space = _int_field(frame, "addressSpaceBytes", 1)
        max_log = _int_field(frame, "maxLogBytes", 1)
        self.max_value_bytes = _int_field(frame, "maxValueBytes", 0)
        spaces = _namespaces(frame)
        self.cap = self.max_value_bytes
        self.channel.cap = frame_cap(max_log, self.max_value_bytes)
        self.cpu_soft = apply_limits(cpu, address_space)
        try:
            self.ballast = bytearray(_BALLAST_BYTES)
        except MemoryError:
            raise LimitError(
                "bootstrap: applying resource limits failed: addressSpaceBytes %d leaves no room for the bootstrap"
                % address_space
            ) from None

        # Nothing but fds 0 to 3: whatever else the host held without close-on-exec
        # is not the program's.
        _closerange(PROTOCOL_FD + 1, _MAX_FDS)
        # fd 0: reads get EOF.
        fd = _open(_devnull, _O_RDONLY)
        if fd != 0:
            _dup2(fd, 0)
            _close(fd)
        _sys.stdin = open(0, "r", encoding="utf-8", closefd=False)

        module = _ModuleType("__main__")
        g = module.__dict__
        g["__builtins__"] = _builtins_module
        self.globals = g
        bridge = Bridge(self.channel)
        self.bridge = bridge
        classes = {}
        proxies = []
        for global_name, names, ec in spaces:
            cls = prop = None
            if ec is not None:
                cls = classes.get(ec[0])
                if cls is None:
                    cls = classes[ec[0]] = make_error_class(ec[0], ec[1])
                elif not hasattr(cls, ec[1]):
                    setattr(cls, ec[1], None)
                prop = ec[1]
            members = [(n, bridge.make_member(global_name, n, cls, prop)) for n in names]
            proxies.append((global_name, make_namespace(global_name, members)))
        g.update(classes)
        for global_name, proxy in proxies:
            g[global_name] = proxy
        self.module = module
        self.ledger = Ledger(self.channel, max_log)
        # The bootstrap is imported: its directory leaves sys.path, so that what
        # another program may write into it while this child waits is never imported.
        own = _sys.argv[1] if len(_sys.argv) > 1 else None
        _sys.path[:] = [p for p in _sys.path if p != own]
        self.channel.send(b'{"type":"boot-ack"}\n')

    def wait_for_run(self):
        """Wait for run; return its frame.

        A host sends run as soon as it reads boot-ack, unless the child is one
        its pool keeps for later. A child that has waited _WARM_AFTER ms is
        taken for the latter and warms up while it waits: it imports asyncio,
        a part at a time, looking for run after each, and makes the event loop,
        so that its program starts at once."""
        channel = self.channel
        timeout = _WARM_AFTER
        while True:
            frame = channel.read_frame(timeout)
            if frame is IDLE:
                timeout = self.warm_step()
            elif frame is not None and frame.get("type") == "run":
                return frame

    def warm_step(self):
        """Take the next step of warming up; the timeout of the next wait for
        run: 0 while steps remain, None (no limit) once warm."""
        step = self.warmed
        self.warmed = step + 1
        try:
            if step < len(_ASYNCIO_PARTS):
                try:
                    __import__(_ASYNCIO_PARTS[step])
                except ImportError:
                    pass  # not a part of this version
                return 0
            _load_asyncio()
            self.loop = _new_event_loop()
        except Exception:
            pass  # the run meets the trouble itself, as a cold child would
        return None

    def run(self):
        """Wait for run, then run the program, on the event loop if it can
        suspend; never returns."""
        frame = self.wait_for_run()
        source = frame.get("program")
        if type(source) is not str:
            raise BootError("bootstrap: invalid run frame: program must be a string")
        self.lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # as the parser counts lines
        _sys.stdout = LogStream(self.ledger, "<stdout>", 1)
        _sys.stderr = LogStream(self.ledger, "<stderr>", 2)
        _modules["__main__"] = self.module
        self.fresh_home()
        g = self.globals
        try:
            code, star, suspends = compile_program(source)
            if suspends:
                _load_asyncio()
                if self.loop is None:
                    self.loop = _new_event_loop()
            exec(code, g)
            fn = g.pop("<module>")
            coro = fn(**{STAR_HELPER: star_importer(g)}) if star else fn()
            del fn
        except BaseException as e:
            self.complete(False, e)
        if suspends:
            self.run_on_loop(coro)
        self.run_inline(coro)

    def fresh_home(self):
        """Give the run HOME and TMPDIR of its own, made now, empty: what another
        program wrote into the child's directory while it waited is not there."""
        home = _environ.get("HOME")
        if not home:
            return
        for _ in range(100):
            work = _join(home, "run-" + _urandom(8).hex())
            try:
                _mkdir(work, 0o700)
            except FileExistsError:
                continue
            _environ["HOME"] = _environ["TMPDIR"] = work
            return

    def run_inline(self, coro):
        """Run the coroutine of a program that never suspends to its end in one
        step, with no event loop; never returns."""
        try:
            coro.send(None)
        except StopIteration as e:  # the return: one the program raises becomes a RuntimeError (PEP 479)
            self.complete(True, e.value)
        except BaseException as e:
            self.complete(False, e)
        self.complete(False, RuntimeError("the program suspended, and it runs without an event loop"))

    def run_on_loop(self, coro):
        """Run the program's coroutine on the event loop; never returns."""
        loop = self.loop
        _set_event_loop(loop)
        bridge = self.bridge
        bridge.loop = loop
        bridge.fail = lambda e: self.complete(False, e)
        loop.add_reader(self.channel.fd, bridge.on_readable)
        loop.call_soon(bridge.on_inbox)  # whatever came with the run frame

        def wakeup():
            try:
                loop.call_soon_threadsafe(bridge.on_inbox)
            except RuntimeError:
                pass

        self.channel.wakeup = wakeup
        complete = self.complete

        async def runner():
            try:
                value = await coro
            except BaseException as e:
                complete(False, e)
            complete(True, value)

        try:
            loop.run_until_complete(runner())
        except BaseException as e:
            complete(False, e)
        complete(False, RuntimeError("the event loop stopped before the program completed"))
