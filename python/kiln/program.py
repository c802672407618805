"""The child bootstrap of a one-shot program: docs/programs.md, the child's side.

The host starts

    python3 -I -c 'import sys; sys.path.insert(0, sys.argv[1]); from kiln.program import main; main()' <dir>

with fd 3 one end of a Unix stream socket pair. main() then

1. reads ``boot`` from fd 3, applies the resource limits (RLIMIT_CORE 0,
   RLIMIT_CPU (cpuSeconds, cpuSeconds + 1), RLIMIT_AS, each clamped to the
   stricter of the request and what was inherited), puts fd 0 on /dev/null,
   builds one proxy global per namespace and sends ``boot-ack``;
2. waits for ``run`` (a child left waiting, as a pool's are, imports asyncio
   meanwhile), captures print / sys.stdout / sys.stderr as ``log`` frames
   under the child's ledger, compiles the program as the body of an ``async
   def`` (top-level await; ``return v`` is the completion) and runs it in one
   of two modes, chosen from its source before it starts (_needs_loop):
   - on an asyncio event loop, when it may need one (it mentions asyncio,
     imports a module not known to do without, or can import by a computed
     name): binding calls go out as ``call`` frames and their ``reply``
     frames come back through a reader on that loop, so that they can run
     concurrently (asyncio.gather);
   - else without one, its coroutine driven directly (_Child.drive): a
     binding call sends its ``call`` frame and reads fd 3 in place until its
     ``reply`` comes. This spares the child importing asyncio, most of its
     cold start, and a call the loop's hops.
   Logs, limits, value checks, tracebacks and completion are one code path
   for both;
3. sends exactly one ``done`` and leaves with os._exit(0).

Everything the bootstrap relies on after model code starts is bound here,
before it starts: the os / sys / signal functions, the fd-3 channel, the JSON
codec, the builtins (this module looks them up in a private snapshot). A
program that rebinds print, builtins, sys.stdout or module attributes, or
deletes entries of sys.modules, cannot keep ``done`` from being sent; one that
closes fd 3, kills itself or digs into this module's objects can, as it could
always forge frames on fd 3 anyway: the host treats every frame as hostile.
"""

import builtins as _builtins_module

# Hardening: functions defined below look builtins up in this snapshot, taken
# when the launcher imports the module, before any model code runs.
__builtins__ = dict(vars(_builtins_module))

import _signal
import _socket
import _thread
import ast as _ast
import codecs as _codecs
import io as _io
import os as _os
import re as _re
import resource as _resource
import select as _select
import sys as _sys
import time as _time

from kiln import jsonplain as _jp

__all__ = ["main"]

# --- bound before model code runs ------------------------------------------------

_write = _os.write
_set_blocking = _os.set_blocking
_exit = _os._exit
_open = _os.open
_dup2 = _os.dup2
_close = _os.close
_getpid = _os.getpid
_kill = _os.kill
_devnull = _os.devnull
_O_RDONLY = _os.O_RDONLY
_poll = _select.poll
_socket_object = _socket.socket
_MSG_DONTWAIT = _socket.MSG_DONTWAIT
_clock = _time.perf_counter
# After each frame it sends, a call waiting in place polls fd 3 this long before it
# sleeps: the host's reply usually comes sooner, and a reply that finds the child asleep
# waits for its CPU to wake, which on a virtual machine costs more than the reply itself.
_POLL_SECONDS = 0.0003 if len(_os.sched_getaffinity(0)) > 1 else 0.0  # a spare CPU to poll on
_SEND_FLAGS = _socket.MSG_DONTWAIT | getattr(_socket, "MSG_NOSIGNAL", 0)
_POLLIN = _select.POLLIN
_POLLOUT = _select.POLLOUT
_POLLHUP = _select.POLLHUP
_POLLERR = _select.POLLERR
_getrusage = _resource.getrusage
_getrlimit = _resource.getrlimit
_setrlimit = _resource.setrlimit
_RLIM_INFINITY = _resource.RLIM_INFINITY
_RUSAGE_SELF = _resource.RUSAGE_SELF
_RUSAGE_CHILDREN = _resource.RUSAGE_CHILDREN
_RLIMIT_CORE = _resource.RLIMIT_CORE
_RLIMIT_CPU = _resource.RLIMIT_CPU
_RLIMIT_AS = getattr(_resource, "RLIMIT_AS", None)
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
_SIGKILL = _signal.SIGKILL
_raise_signal = _signal.raise_signal
_RLock = _thread.RLock
_ModuleType = type(_sys)
_modules = _sys.modules
_settrace = _sys.settrace
_setprofile = _sys.setprofile
_setrecursionlimit = _sys.setrecursionlimit
_RECURSION_LIMIT = _sys.getrecursionlimit()
_builtins_dict = _builtins_module.__dict__
_builtins_snapshot = dict(_builtins_dict)
_incremental_utf8 = _codecs.getincrementaldecoder("utf-8")
_encode = _jp.encode
_encode_checked = _jp.encode_checked
_string_text = _jp.string_text
_loads_bytes = _jp.loads_bytes
_OK = _jp.OK
_OVER_BUDGET = _jp.OVER_BUDGET
_NotLossless = _jp.NotLossless
_get_cause = BaseException.__cause__.__get__
_get_context = BaseException.__context__.__get__
_get_suppress = BaseException.__suppress_context__.__get__
_get_traceback = BaseException.__traceback__.__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_type_module = type.__dict__["__module__"].__get__
_BaseExceptionGroup = getattr(_builtins_module, "BaseExceptionGroup", None)

FILENAME = "<model>"
CHAIN_LIMIT = 100
CHAIN_MARKER = "[kiln] exception chain truncated at %d links" % CHAIN_LIMIT
TRUNCATED = "… [truncated]"
_LINE_SPLIT = _re.compile(r"\r\n|\r|\n")
_SURROGATES = _re.compile("[\ud800-\udfff]")
_BALLAST_BYTES = 1 << 20  # freed at completion so a program that ran out of memory can still be reported

_UNRENDERABLE = b'{"type":"done","error":{"kind":"exception","message":"<unrenderable>"}}\n'

#: kiln.protocol.PROTOCOL_FD, spelt out here: importing kiln.protocol costs a
#: cold child the typing module (a test checks that the two agree).
PROTOCOL_FD = 3

_READ_SIZE = 1 << 16  # what one read of fd 3 asks for: a buffer malloc serves without mmap
_WARM_AFTER = 500  # ms a booted child waits for run before it takes itself for a pool's and warms up


# --- asyncio, for the programs that need it ---------------------------------------

# Importing asyncio costs a cold child more than everything else it does put
# together, so the child imports it only for a program that needs an event
# loop (_needs_loop), before that program's code starts, or while it waits for
# run in a pool (_Child.wait_for_run); these are bound then.
_new_event_loop = _set_event_loop = _get_running_loop = None


def _load_asyncio():
    """Import asyncio and bind what the child uses of it; idempotent."""
    global _new_event_loop, _set_event_loop, _get_running_loop
    if _new_event_loop is None:
        import asyncio

        _set_event_loop = asyncio.set_event_loop
        _get_running_loop = asyncio.get_running_loop
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


def _frame(text):
    return (text + "\n").encode("utf-8")


# --- the channel -----------------------------------------------------------------


class _Channel:
    """fd 3, both directions.

    The socket is in blocking mode, so that a binding call waiting in place
    (take_lines(wait=True)) sleeps in one recv; every other read and every
    write asks not to block (MSG_DONTWAIT) and waits in poll instead.

    Frames go out whole under one lock; a frame sent from inside a write (a
    signal handler that logs) waits its turn. While a write waits for room it
    keeps reading what the host sends into the inbox, so the child never
    stops reading because it is writing, whatever the host does; a reader
    that found whole frames there has the pump woken (``wakeup``)."""

    def __init__(self, fd):
        self.fd = fd
        self.sock = _socket_object(fileno=fd)  # holds fd 3 for the child's life
        _set_blocking(fd, True)
        self.sock_recv = self.sock.recv
        self.sock_send = self.sock.send
        self.lock = _RLock()
        self.busy = False
        self.queue = []
        self.dirty = False  # a write stopped part way: the next frame starts a new line
        self.closed = False  # done was sent: nothing more goes out
        self.inbox = bytearray()
        self.absorbed = False  # bytes were read into the inbox by a writer
        self.wakeup = None  # tells the pump to look at the inbox
        self.poll_until = 0.0  # a wait polls, not sleeps, until this _clock()

    def send(self, data):
        with self.lock:
            if self.closed:
                return
            if self.busy:
                self.queue.append(data)
                return
            self.busy = True
            try:
                self._put(data)
                while self.queue:
                    self._put(self.queue.pop(0))
            finally:
                self.busy = False
            if self.absorbed and self.wakeup is not None:
                self.absorbed = False
                self.wakeup()

    def final(self, data):
        """Send the last frame (done) and close the channel for sending."""
        with self.lock:
            if self.closed:
                return
            if self.dirty:
                data = b"\n" + data
            self.queue.clear()
            self.busy = True
            try:
                self._put(data)
            finally:
                self.closed = True
                self.busy = False

    def _put(self, data):
        self.dirty = True
        while data:
            try:
                n = self.sock_send(data, _SEND_FLAGS)
            except BlockingIOError:
                self._wait(_POLLOUT)
                continue
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            except OSError:
                _exit(1)  # the host is gone or fd 3 was taken away: nobody to tell
            if n == len(data):
                break
            data = memoryview(data)[n:]
        self.dirty = False
        self.poll_until = _clock() + _POLL_SECONDS

    def _wait(self, events, timeout=None):
        """Wait until fd 3 is ready for events, or timeout ms (None: no limit);
        read whatever arrives meanwhile. Whether fd 3 was ready."""
        poller = _poll()
        poller.register(self.fd, events | _POLLIN)
        ready_list = poller.poll(timeout)
        for _, ready in ready_list:
            if ready & (_POLLIN | _POLLHUP | _POLLERR):
                self._absorb()
        return bool(ready_list)

    def _absorb(self):
        """Read what there is into the inbox, up to 1 MiB; whether anything
        came. EOF ends the child."""
        got = False
        for _ in range(16):
            try:
                data = self.sock_recv(_READ_SIZE, _MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                _exit(1)  # the host closed the channel
            self.inbox += data
            got = self.absorbed = True
            if len(data) < _READ_SIZE:
                break
        return got

    def take_lines(self, wait=False):
        """The whole lines in the inbox, removed from it; with wait, waits
        for at least one. Lock held."""
        inbox = self.inbox
        nl = inbox.rfind(b"\n")
        while nl < 0:
            if not wait:
                return ()
            try:
                data = self._recv_polling()  # every binding call waiting in place waits here
            except BlockingIOError:  # fd 3 made non-blocking behind the channel's back
                self._wait(_POLLIN)
                nl = inbox.rfind(b"\n")
                continue
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            except OSError as e:
                if e.errno is None:
                    raise  # a signal handler's, raised while recv slept: the program's to see
                data = b""
            if not data:
                _exit(1)  # the host closed the channel
            if not inbox and data[-1:] == b"\n":
                return data[:-1].split(b"\n")  # whole lines, as a reply mostly comes
            inbox += data
            nl = inbox.rfind(b"\n")
        lines = bytes(inbox[:nl]).split(b"\n")
        del inbox[: nl + 1]
        return lines

    def _recv_polling(self):
        """Receive what fd 3 holds: polling until the window after the last send closes,
        then sleeping in recv."""
        while _clock() < self.poll_until:
            try:
                return self.sock_recv(_READ_SIZE, _MSG_DONTWAIT)
            except BlockingIOError:
                pass
        return self.sock_recv(_READ_SIZE)

    def read_frame(self, timeout=None):
        """Wait for one whole frame; return it decoded, None if the line is not
        a JSON object, or _IDLE if fd 3 stayed quiet for timeout ms (None: no
        limit). Only for before the program runs."""
        while True:
            with self.lock:
                nl = self.inbox.find(b"\n")
                if nl >= 0:
                    line = bytes(self.inbox[:nl])
                    del self.inbox[: nl + 1]
                    return _decode_frame(line)
                if not self._absorb() and not self._wait(_POLLIN, timeout):
                    return _IDLE


_IDLE = object()  # read_frame: nothing came in time
_MISSING = object()


def _decode_frame(line):
    try:
        frame = _loads_bytes(line)
    except ValueError:
        return None
    return frame if type(frame) is dict else None


# --- logs ----------------------------------------------------------------------------


class _Ledger:
    """The child's log ledger: a budget of maxLogBytes − 1; an entry costs its
    escaped JSON string size (quotes included) + 1, billed as its pieces go out.
    The entry that does not fit is replaced by one truncated frame; nothing is
    logged after it. stdout and stderr share one line buffer: the frames carry
    no stream, and an open piece joins whatever log frame follows."""

    def __init__(self, channel, max_log_bytes):
        self.channel = channel
        self.left = max_log_bytes - 1
        self.lock = _RLock()
        self.stopped = False
        self.buffer = []
        self.buffered = 0  # code points in buffer
        self.open = False  # the current entry began with an open piece already sent

    def write(self, s):
        with self.lock:
            if self.stopped:
                return
            if "\n" not in s:
                if s:
                    self.buffer.append(s)
                    self.buffered += len(s)
                    if self.buffered + (0 if self.open else 3) > self.left:
                        self._truncate()  # cannot fit whatever else comes
                return
            pieces = s.split("\n")
            last = pieces.pop()
            for piece in pieces:
                if self.buffer:
                    self.buffer.append(piece)
                    piece = "".join(self.buffer)
                    self.buffer.clear()
                    self.buffered = 0
                self._emit(piece, True)
                if self.stopped:
                    return
            if last:
                self.buffer.append(last)
                self.buffered = len(last)
                if self.buffered + 3 > self.left:
                    self._truncate()

    def flush(self):
        with self.lock:
            if self.stopped or not self.buffer:
                return
            piece = "".join(self.buffer)
            self.buffer.clear()
            self.buffered = 0
            self._emit(piece, False)

    def finish(self):
        """At completion: the pending partial line is the last line."""
        with self.lock:
            if not self.stopped and (self.buffer or self.open):
                piece = "".join(self.buffer)
                self.buffer.clear()
                self._emit(piece, True)
            self.stopped = True

    def _emit(self, piece, closes):
        """Send one piece of an entry, billed; lone surrogates become U+FFFD."""
        if _SURROGATES.search(piece) is not None:
            piece = piece.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        cost0 = 0 if self.open else 3  # quotes and the + 1, billed with an entry's first piece
        if len(piece) + cost0 > self.left:
            self._truncate()
            return
        text, size = _string_text(piece)
        cost = size - 2 + cost0
        if cost > self.left:
            self._truncate()
            return
        self.left -= cost
        if closes:
            self.open = False
            self.channel.send(_frame('{"type":"log","text":%s}' % text))
        else:
            self.open = True
            self.channel.send(_frame('{"type":"log","text":%s,"open":true}' % text))

    def _truncate(self):
        self.stopped = True
        self.buffer.clear()
        self.buffered = 0
        self.channel.send(b'{"type":"log","text":"","truncated":true}\n')


class _LogStream(_io.TextIOBase):
    """sys.stdout / sys.stderr for model code: text goes to the ledger."""

    encoding = "utf-8"
    errors = "strict"
    newlines = None
    line_buffering = True
    write_through = True
    mode = "w"

    def __init__(self, ledger, name, fd):
        self._ledger = ledger
        self.name = name
        self._fd = fd
        self.buffer = _LogBuffer(self)

    def write(self, s):
        if type(s) is not str:
            if not isinstance(s, str):
                raise TypeError("write() argument must be str, not %s" % type(s).__name__)
            s = str.__str__(s)
        self._ledger.write(s)
        return len(s)

    def flush(self):
        self._ledger.flush()

    def close(self):
        self._ledger.flush()

    @property
    def closed(self):
        return False

    def fileno(self):
        return self._fd

    def isatty(self):
        return False

    def readable(self):
        return False

    def writable(self):
        return True

    def seekable(self):
        return False

    def reconfigure(self, **kwargs):
        pass

    def __repr__(self):
        return "<kiln log stream %s>" % self.name


class _LogBuffer:
    """sys.stdout.buffer: bytes decoded as UTF-8, malformed bytes replaced."""

    def __init__(self, stream):
        self._stream = stream
        self._decoder = _incremental_utf8("replace")
        self.raw = None

    def write(self, b):
        data = bytes(b)
        self._stream.write(self._decoder.decode(data))
        return len(data)

    def flush(self):
        self._stream.flush()

    def writable(self):
        return True

    def fileno(self):
        return self._stream.fileno()


# --- bindings --------------------------------------------------------------------


class _Bridge:
    """Binding calls: ids 0, 1, 2, … claimed, written and advanced under the
    channel's lock. How a caller waits for its reply depends on the run's mode:

    - without an event loop (``loop`` None) the call waits in place, holding
      the channel: it reads fd 3 until its reply comes, dropping the frames
      that are not a reply it waits for, as the pump would;
    - on an event loop, the call awaits a future of its own loop; the pump, a
      reader on the main loop, settles it: at once on the main loop, through
      call_soon_threadsafe on another (a thread's asyncio.run)."""

    def __init__(self, channel):
        self.channel = channel
        self.next_id = 0
        self.pending = {}  # id -> (loop, future), or None for a call waiting in place
        self.replies = {}  # id -> the reply to a call waiting in place
        self.loop = None  # the main event loop, once the run has one

    def make_member(self, global_name, name, error_class, member_property):
        bridge = self
        head = ',"global":%s,"name":%s,"args":' % (_string_text(global_name)[0], _string_text(name)[0])

        async def member(args=None):
            try:
                args_text = _encode(args)
            except _NotLossless as e:
                raise TypeError(
                    "%s.%s: the argument is not lossless JSON: %s" % (global_name, name, e.reason)
                ) from None
            if bridge.loop is None:
                reply = bridge.call(global_name, name, head, args_text)
            else:
                reply = await bridge.submit(global_name, name, head, args_text)
            if reply.get("ok") is True:
                return reply.get("value")
            message = reply.get("message")
            if type(message) is not str:
                message = "binding call rejected"
            if error_class is None:
                raise RuntimeError(message)
            error = error_class(message)
            setattr(error, member_property, name)
            raise error

        member.__name__ = name
        member.__qualname__ = "%s.%s" % (global_name, name)
        return member

    def send_call(self, entry, global_name, name, head, args_text):
        """Claim the next id for entry and send the call; the id. Channel lock held."""
        channel = self.channel
        if channel.closed:
            raise RuntimeError("%s.%s: the program has completed" % (global_name, name))
        call_id = self.next_id
        self.pending[call_id] = entry
        channel.send(('{"type":"call","id":%d%s%s}\n' % (call_id, head, args_text)).encode("utf-8"))
        self.next_id = call_id + 1
        return call_id

    def call(self, global_name, name, head, args_text):
        """A call waited for in place: its reply frame."""
        channel = self.channel
        replies = self.replies
        with channel.lock:
            call_id = self.send_call(None, global_name, name, head, args_text)
            try:
                while call_id not in replies:
                    for line in channel.take_lines(True):
                        self.on_line(line)
            finally:
                self.pending.pop(call_id, None)  # left by a signal handler's exception: its reply is dropped
            return replies.pop(call_id)

    def submit(self, global_name, name, head, args_text):
        """A call awaited on the running event loop: the future of its reply frame."""
        loop = _get_running_loop()
        future = loop.create_future()
        with self.channel.lock:
            self.send_call((loop, future), global_name, name, head, args_text)
        return future

    def on_readable(self):
        """The pump, called by the loop when fd 3 is readable."""
        channel = self.channel
        with channel.lock:
            channel._absorb()
            channel.absorbed = False
            lines = channel.take_lines()
        for line in lines:
            self.on_line(line)

    def on_inbox(self):
        """The pump, woken by a writer that read frames while it waited."""
        channel = self.channel
        with channel.lock:
            lines = channel.take_lines()
        for line in lines:
            self.on_line(line)

    def on_line(self, line):
        """Hand a reply to its caller; drop every other line. Runs on the main
        loop, or in place in the call that waits (channel lock held)."""
        try:
            frame = _loads_bytes(line)
        except ValueError:
            return
        if type(frame) is not dict or frame.get("type") != "reply":
            return
        call_id = frame.get("id")
        if type(call_id) is float and call_id.is_integer():
            call_id = int(call_id)
        if type(call_id) is not int:
            return
        entry = self.pending.pop(call_id, _MISSING)
        if entry is _MISSING:
            return  # not a call in flight
        if entry is None:
            self.replies[call_id] = frame
            return
        loop, future = entry
        if loop is self.loop:
            if not future.done():  # cancelled: its caller is gone
                future.set_result(frame)
            return
        try:
            loop.call_soon_threadsafe(_settle, future, frame)
        except RuntimeError:
            pass  # that loop is closed: its caller is gone


def _settle(future, frame):
    if not future.done():
        future.set_result(frame)


def _make_namespace(global_name, members):
    """The proxy global: ns.name and ns["name"] give the member's async function."""
    members = dict(members)
    object_getattribute = object.__getattribute__

    def getattribute(self, attr):
        fn = members.get(attr)
        if fn is not None:
            return fn
        if attr[:2] == "__" and attr[-2:] == "__":
            return object_getattribute(self, attr)
        raise AttributeError("%s has no binding %r" % (global_name, attr))

    class Namespace:
        __slots__ = ()

        def __getattr__(self, attr):  # what the class does not have
            return getattribute(self, attr)

        def __getitem__(self, key):
            fn = members.get(key) if type(key) is str else None
            if fn is None:
                raise KeyError(key)
            return fn

        def __setattr__(self, attr, value):
            raise AttributeError("%s is read-only" % global_name)

        def __delattr__(self, attr):
            raise AttributeError("%s is read-only" % global_name)

        def __contains__(self, key):
            return type(key) is str and key in members

        def __iter__(self):
            return iter(list(members))

        def __len__(self):
            return len(members)

        def __dir__(self):
            return sorted(members)

        def __repr__(self):
            return "<bindings %s: %s>" % (global_name, ", ".join(members))

    if any(n[:2] == "__" and n[-2:] == "__" for n in members):
        Namespace.__getattribute__ = getattribute  # a binding named like a special attribute wins
    else:
        for n, fn in members.items():  # looked up as class attributes: no Python call
            setattr(Namespace, n, staticmethod(fn))
    Namespace.__name__ = Namespace.__qualname__ = "Bindings"
    Namespace.__module__ = "builtins"
    return Namespace()


def _make_error_class(name, member_property):
    cls = type(name, (Exception,), {"__module__": "__main__", "__qualname__": name,
                                     "__doc__": "A rejected binding call."})
    setattr(cls, member_property, None)
    return cls


# --- compiling the program -----------------------------------------------------------

_STAR_HELPER = "__kiln_import_star__"
_SCOPES = (_ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef)
_COMPREHENSIONS = (_ast.ListComp, _ast.SetComp, _ast.DictComp, _ast.GeneratorExp)
_STATEMENT_LISTS = ("body", "orelse", "finalbody")


def _prepare(tree):
    """Rewrite the module body for life inside an async def; return
    (future imports, body, names bound at top level, whether a star import
    was rewritten). Raises SyntaxError for a top-level yield."""
    body = tree.body
    head = []
    i = 0
    if body and type(body[0]) is _ast.Expr and type(body[0].value) is _ast.Constant and type(body[0].value.value) is str:
        i = 1
    while i < len(body) and type(body[i]) is _ast.ImportFrom and body[i].module == "__future__":
        i += 1
    head, body = body[:i], body[i:]
    futures = [n for n in head if type(n) is _ast.ImportFrom]
    body = [n for n in head if type(n) is not _ast.ImportFrom] + body
    names = set()
    star = False
    holder = _ast.Module(body=body, type_ignores=[])
    todo = [(holder, False)]
    while todo:
        node, in_comprehension = todo.pop()
        t = type(node)
        # statement lists of this scope: rewrite annotated names and star imports
        for field in _STATEMENT_LISTS:
            stmts = getattr(node, field, None)
            if type(stmts) is not list:
                continue
            for j, st in enumerate(stmts):
                st_t = type(st)
                if st_t is _ast.AnnAssign and type(st.target) is _ast.Name:
                    # "x: T = v" at module level; inside the function x is global,
                    # and a global may not be annotated: keep the binding.
                    # (Every node made here takes the location of the statement it replaces.)
                    if st.value is None:
                        new = _ast.Pass()
                    else:
                        target = _ast.copy_location(_ast.Name(id=st.target.id, ctx=_ast.Store()), st)
                        new = _ast.Assign(targets=[target], value=st.value)
                    stmts[j] = _ast.copy_location(new, st)
                elif st_t is _ast.ImportFrom and any(a.name == "*" for a in st.names):
                    star = True
                    call = _ast.copy_location(_ast.Call(
                        func=_ast.copy_location(_ast.Name(id=_STAR_HELPER, ctx=_ast.Load()), st),
                        args=[_ast.copy_location(_ast.Constant(value=st.module or ""), st),
                              _ast.copy_location(_ast.Constant(value=st.level or 0), st)],
                        keywords=[],
                    ), st)
                    stmts[j] = _ast.copy_location(_ast.Expr(value=call), st)
        if t is _ast.Name:
            if not in_comprehension and type(node.ctx) is not _ast.Load:
                names.add(node.id)
            continue
        if t is _ast.NamedExpr:
            if type(node.target) is _ast.Name:
                names.add(node.target.id)
            todo.append((node.value, in_comprehension))
            continue
        if t in (_ast.Yield, _ast.YieldFrom):
            raise SyntaxError("'yield' outside function", (FILENAME, node.lineno, node.col_offset + 1, None))
        if t in _SCOPES:
            names.add(node.name)
            parts = list(node.decorator_list)
            if t is _ast.ClassDef:
                parts += node.bases + [k.value for k in node.keywords]
            else:
                a = node.args
                parts += a.defaults + [d for d in a.kw_defaults if d is not None]
                for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
                    if arg is not None and arg.annotation is not None:
                        parts.append(arg.annotation)
                if node.returns is not None:
                    parts.append(node.returns)
            todo.extend((p, in_comprehension) for p in parts)
            continue
        if t is _ast.Lambda:
            a = node.args
            todo.extend((d, in_comprehension) for d in a.defaults + [d for d in a.kw_defaults if d is not None])
            continue
        if t in _COMPREHENSIONS:
            todo.extend((c, True) for c in _ast.iter_child_nodes(node))
            continue
        if t is _ast.Import or t is _ast.ImportFrom:
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
            continue
        if t is _ast.Global:
            names.update(node.names)
            continue
        if t is _ast.ExceptHandler and node.name:
            names.add(node.name)
        elif t.__name__ in ("MatchAs", "MatchStar") and node.name:
            names.add(node.name)
        elif t.__name__ == "MatchMapping" and node.rest:
            names.add(node.rest)
        todo.extend((c, in_comprehension) for c in _ast.iter_child_nodes(node))
    names.discard(_STAR_HELPER)
    return futures, holder.body, names, star


# --- the mode: with an event loop or without ------------------------------------------

# A program runs on an asyncio event loop when it may need one; else without
# (_Child.drive), which spares a cold child importing asyncio and makes a
# binding call a plain round trip. It needs one when its source mentions
# asyncio anywhere (comments and strings included), imports a module outside
# _NO_LOOP_MODULES, or can import one by a name it computes (__import__,
# importlib, exec, eval, help, breakpoint). The modules below are standard
# library modules that, submodules included, neither use asyncio nor import
# modules by computed names: a program using only them cannot reach asyncio
# but by obfuscation, and one that does gets a RuntimeError saying what to do
# (_NO_LOOP). A module missing from the list costs speed, never correctness.
_NO_LOOP_MODULES = frozenset((
    "__future__", "abc", "argparse", "array", "ast", "base64", "binascii", "bisect",
    "builtins", "bz2", "calendar", "cmath", "codecs", "collections", "colorsys",
    "contextlib", "contextvars", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "dis", "enum", "errno", "fnmatch", "fractions", "functools", "gc", "glob",
    "graphlib", "gzip", "hashlib", "heapq", "hmac", "html", "inspect", "io", "ipaddress",
    "itertools", "json", "keyword", "locale", "lzma", "math", "mimetypes", "numbers",
    "operator", "os", "pathlib", "platform", "pprint", "quopri", "random", "re",
    "reprlib", "resource", "secrets", "select", "selectors", "shlex", "shutil", "signal",
    "socket", "sqlite3", "ssl", "stat", "statistics", "string", "struct", "subprocess",
    "sys", "tarfile", "tempfile", "textwrap", "time", "token", "tokenize", "traceback",
    "types", "typing", "unicodedata", "urllib", "uuid", "warnings", "weakref",
    "xml.etree", "zipfile", "zlib", "zoneinfo",
))
_LOOP_WORDS = ("asyncio", "__import__", "import_module")  # anywhere in the source
_LOOP_NAMES = frozenset(("exec", "eval", "help", "breakpoint", "__import__", "import_module"))
_NO_LOOP = (
    "the program awaited a %s, which needs an event loop, and it runs without one: "
    "kiln runs a program on an asyncio event loop when its source mentions asyncio"
)


def _no_loop_module(name):
    """Whether importing the module name (dotted) keeps a program off the loop."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        if ".".join(parts[:i]) in _NO_LOOP_MODULES:
            return True
    return False


def _needs_loop(tree, source):
    """Whether the program, parsed as tree, runs on an event loop (see above)."""
    for word in _LOOP_WORDS:
        if word in source:
            return True
    if "import" not in source and not any(name in source for name in _LOOP_NAMES):
        return False
    todo = [tree]
    while todo:
        node = todo.pop()
        t = type(node)
        if t is _ast.Name:
            if node.id in _LOOP_NAMES:
                return True
            continue
        if t is _ast.Attribute:
            if node.attr in _LOOP_NAMES:
                return True
        elif t is _ast.Import:
            for alias in node.names:
                if not _no_loop_module(alias.name):
                    return True
        elif t is _ast.ImportFrom:
            if node.level or not _no_loop_module(node.module or ""):
                return True
        todo.extend(_ast.iter_child_nodes(node))
    return False


# --- compiling the program (continued) --------------------------------------------------


_LINE_1 = {"lineno": 1, "col_offset": 0, "end_lineno": 1, "end_col_offset": 0}


def _compile(source):
    """Compile the program as ``async def <module>():`` with its top-level
    names declared global, so that it reads like a module; return (the code,
    whether the function takes the star-import helper, whether the program
    runs on an event loop)."""
    tree = _ast.parse(source, FILENAME, "exec")
    needs_loop = _needs_loop(tree, source)
    futures, body, names, star = _prepare(tree)
    # The nodes made here sit at line 1, column 0, where ast.fix_missing_locations
    # would put them (the parsed ones and _prepare's have theirs), without its walk.
    if names:
        body.insert(0, _ast.Global(names=sorted(names), **_LINE_1))
    if not body:
        body.append(_ast.Pass(**_LINE_1))
    kwonly = [_ast.arg(arg=_STAR_HELPER, **_LINE_1)] if star else []
    args = _ast.arguments(
        posonlyargs=[], args=[], vararg=None, kwonlyargs=kwonly,
        kw_defaults=[None] * len(kwonly), kwarg=None, defaults=[],
    )
    fn = _ast.AsyncFunctionDef(
        name="<module>", args=args, body=body, decorator_list=[], returns=None,
        type_comment=None, **_LINE_1,
    )
    if "type_params" in _ast.AsyncFunctionDef._fields:  # Python 3.12+
        fn.type_params = []
    module = _ast.Module(body=futures + [fn], type_ignores=[])
    code = compile(module, FILENAME, "exec", dont_inherit=True)
    return code, star, needs_loop


def _star_importer(namespace):
    def import_star(module, level):
        m = __import__(module, namespace, None, ("*",), level)
        public = getattr(m, "__all__", None)
        if public is None:
            public = [n for n in vars(m) if not n.startswith("_")]
        for n in public:
            namespace[n] = getattr(m, n)

    return import_star


# --- tracebacks ----------------------------------------------------------------------


def _class_name(cls):
    name = _type_qualname(cls)
    module = _type_module(cls)
    if type(module) is str and module not in ("builtins", "__main__"):
        return "%s.%s" % (module, name)
    return name


class _Renderer:
    def __init__(self, source_lines):
        self.lines = source_lines

    def source_line(self, lineno, strip=True):
        if type(lineno) is int and 1 <= lineno <= len(self.lines):
            line = self.lines[lineno - 1]
            return line.strip() if strip else line
        return ""

    def render(self, exc):
        chain = []  # (exception, how the older one it leads to relates to it)
        seen = set()
        e = exc
        truncated = False
        while e is not None and id(e) not in seen:
            if len(chain) == CHAIN_LIMIT:
                truncated = True
                break
            seen.add(id(e))
            cause = _get_cause(e)
            context = _get_context(e)
            if cause is not None:
                chain.append((e, "\nThe above exception was the direct cause of the following exception:\n\n"))
                e = cause
            elif context is not None and not _get_suppress(e):
                chain.append((e, "\nDuring handling of the above exception, another exception occurred:\n\n"))
                e = context
            else:
                chain.append((e, None))
                e = None
        out = []
        if truncated:
            out.append(CHAIN_MARKER + "\n")
        for i in range(len(chain) - 1, -1, -1):
            e, link = chain[i]
            if i < len(chain) - 1:
                out.append(link)
            self.one(e, out, "")
        return "".join(out).rstrip("\n")

    def one(self, e, out, indent, depth=0):
        frames = []
        tb = _get_traceback(e)
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename == FILENAME:
                frames.append((tb.tb_lineno, code.co_name))
            tb = tb.tb_next
        if frames:
            out.append(indent + "Traceback (most recent call last):\n")
            last = None
            repeats = 0
            for entry in frames:
                if entry == last:
                    repeats += 1
                    if repeats >= 3:
                        continue
                else:
                    if repeats >= 3:
                        out.append("%s  [Previous line repeated %d more time%s]\n"
                                   % (indent, repeats - 2, "" if repeats - 2 == 1 else "s"))
                    last = entry
                    repeats = 0
                lineno, name = entry
                out.append('%s  File "%s", line %s, in %s\n'
                           % (indent, FILENAME, lineno if type(lineno) is int else "?", name))
                line = self.source_line(lineno)
                if line:
                    out.append("%s    %s\n" % (indent, line))
            if repeats >= 3:
                out.append("%s  [Previous line repeated %d more time%s]\n"
                           % (indent, repeats - 2, "" if repeats - 2 == 1 else "s"))
        out.extend(indent + line + "\n" for line in self.exception_only(e))
        if _BaseExceptionGroup is not None and isinstance(e, _BaseExceptionGroup) and depth < 2:
            subs = list(e.exceptions)
            for n, sub in enumerate(subs[:15], 1):
                out.append("%s+---------------- %d ----------------\n" % (indent, n))
                self.one(sub, out, indent + "| ", depth + 1)
            if len(subs) > 15:
                out.append("%s+---------------- ... ----------------\n%sand %d more exceptions\n"
                           % (indent, indent, len(subs) - 15))

    def exception_only(self, e):
        name = _class_name(type(e))
        lines = []
        if isinstance(e, SyntaxError):
            filename = e.filename if type(e.filename) is str else FILENAME
            lineno = e.lineno
            lines.append('  File "%s", line %s' % (filename, lineno if lineno is not None else "?"))
            text = e.text if type(e.text) is str else (self.source_line(lineno, False) if filename == FILENAME else "")
            if text:
                text = text.rstrip("\n")
                stripped = text.lstrip()
                lines.append("    " + stripped)
                offset = e.offset
                if type(offset) is int and offset >= 1:
                    col = max(0, offset - 1 - (len(text) - len(stripped)))
                    end = e.end_offset if type(getattr(e, "end_offset", None)) is int else offset + 1
                    width = max(1, min(end - offset, len(stripped) - col) if end > offset else 1)
                    lines.append("    " + " " * col + "^" * width)
            msg = e.msg if type(e.msg) is str else str(e)
        else:
            msg = str(e)
            if type(msg) is not str:
                raise TypeError("__str__ returned non-string")
        lines.append("%s: %s" % (name, msg) if msg else name)
        notes = getattr(e, "__notes__", None)
        if type(notes) is list:
            for note in notes:
                lines.append(note if type(note) is str else "<note str() failed>")
        return lines


def _cap(text, cap):
    """text cut to cap UTF-8 bytes, '… [truncated]' reserved inside the cap,
    the cut on a code-point boundary."""
    if _SURROGATES.search(text) is not None:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= cap:
        return text
    marker = TRUNCATED.encode("utf-8")
    if cap < len(marker):
        data, tail = marker, b""
    else:
        cap -= len(marker)
        tail = marker
    while cap > 0 and (data[cap] & 0xC0) == 0x80:
        cap -= 1
    return (data[:cap] + tail).decode("utf-8", "surrogatepass")


# --- limits ---------------------------------------------------------------------------


class _LimitError(Exception):
    pass


def _stricter(requested, inherited):
    if inherited == _RLIM_INFINITY or inherited < 0:
        return requested
    return min(requested, inherited)


def _apply_limits(cpu_seconds, address_space):
    """Apply the limits; return the effective CPU soft limit in seconds."""
    try:
        _setrlimit(_RLIMIT_CORE, (0, 0))
        soft, hard = _getrlimit(_RLIMIT_CPU)
        new_soft = _stricter(_stricter(cpu_seconds, soft), hard)
        new_hard = _stricter(min(cpu_seconds, new_soft) + 1, hard)
        if new_soft >= new_hard and new_hard >= 2:
            new_soft = new_hard - 1  # leave room for SIGXCPU before the kernel's SIGKILL
        new_soft = min(new_soft, new_hard)
        _setrlimit(_RLIMIT_CPU, (new_soft, new_hard))
        cpu_soft = new_soft
        if _RLIMIT_AS is not None and _sys.platform != "darwin":
            soft, hard = _getrlimit(_RLIMIT_AS)
            new_hard = _stricter(address_space, hard)
            new_soft = min(_stricter(address_space, soft), new_hard)
            _setrlimit(_RLIMIT_AS, (new_soft, new_hard))
        _signal_set(_SIGXCPU, _SIG_DFL)
        _sigmask(_SIG_UNBLOCK, {_SIGXCPU})
    except (OSError, ValueError) as e:
        raise _LimitError("bootstrap: applying resource limits failed: %s" % e) from None
    return cpu_soft


# --- the child ---------------------------------------------------------------------------


class _BootError(Exception):
    pass


def _int_field(frame, name, minimum):
    v = frame.get(name)
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is not int or v < minimum:
        raise _BootError("bootstrap: invalid boot frame: %s must be an integer >= %d" % (name, minimum))
    return v


def _namespaces(frame):
    spaces = frame.get("namespaces")
    if type(spaces) is not list:
        raise _BootError("bootstrap: invalid boot frame: namespaces must be an array")
    out = []
    for ns in spaces:
        if type(ns) is not dict or type(ns.get("global")) is not str or type(ns.get("names")) is not list:
            raise _BootError("bootstrap: invalid boot frame: a namespace needs a string global and an array of names")
        names = ns["names"]
        if not all(type(n) is str for n in names):
            raise _BootError("bootstrap: invalid boot frame: binding names must be strings")
        ec = ns.get("errorClass")
        if ec is not None:
            if type(ec) is not dict or type(ec.get("name")) is not str or type(ec.get("memberNameProperty")) is not str:
                raise _BootError("bootstrap: invalid boot frame: errorClass needs a string name and memberNameProperty")
            prop = ec["memberNameProperty"]
            if not prop or prop.startswith("__") or hasattr(BaseException, prop):
                raise _BootError("bootstrap: invalid boot frame: memberNameProperty %r is not usable" % prop)
            ec = (ec["name"], prop)
        out.append((ns["global"], names, ec))
    return out


class _Child:
    def __init__(self):
        self.channel = _Channel(PROTOCOL_FD)
        self.pid = _getpid()
        self.max_value_bytes = 0
        self.cap = None  # what error messages are cut to, once boot said
        self.cpu_soft = None
        self.ledger = None
        self.raw_streams = (_sys.stdout, _sys.stderr)
        self.globals = None
        self.ballast = None
        self.lines = []
        self.loop = None  # the event loop, made for a program that needs one or while warming up
        self.warmed = 0  # the steps of warming up taken

    # -- completion --

    def complete(self, ok, value):
        """Send done for the program's outcome and exit; never returns.

        Runs right where the program's coroutine ended, with no event-loop
        machinery in between. Anything the program left behind that gets in
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
            self.channel.final(_UNRENDERABLE)
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
            message = _Renderer(self.lines).render(exc)
        except MemoryError:
            if self.globals is not None:
                self.globals.clear()  # a program that ran out of memory: let its objects go
            try:
                message = _Renderer(self.lines).render(exc)
            except BaseException:
                message = None
        except BaseException:
            message = None
        if message is None:
            try:
                message = "%s: <diagnostic rendering failed>" % _class_name(type(exc))
            except BaseException:
                self.send_done(_UNRENDERABLE)
        self.send_error("exception", message)

    def send_error(self, kind, message):
        """Send done with an error; never returns."""
        try:
            if self.cap is not None:
                message = _cap(message, self.cap)
            data = _frame('{"type":"done","error":{"kind":"%s","message":%s}}' % (kind, _string_text(message)[0]))
        except BaseException:
            data = _UNRENDERABLE
        self.send_done(data)

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
        soft = self.cpu_soft
        if soft is None or soft == _RLIM_INFINITY or soft < 0:
            return
        own = _getrusage(_RUSAGE_SELF)
        children = _getrusage(_RUSAGE_CHILDREN)
        used = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
        if used >= soft:
            self.flush_raw()
            _raise_signal(_SIGXCPU)
            _kill(_getpid(), _SIGKILL)  # pragma: no cover - SIGXCPU's default action ended us

    # -- the run --

    def boot(self):
        frame = self.channel.read_frame()
        if frame is None or frame.get("type") != "boot":
            raise _BootError("bootstrap: the first frame was not a valid boot frame")
        cpu = _int_field(frame, "cpuSeconds", 1)
        address_space = _int_field(frame, "addressSpaceBytes", 1)
        max_log = _int_field(frame, "maxLogBytes", 1)
        self.max_value_bytes = _int_field(frame, "maxValueBytes", 0)
        spaces = _namespaces(frame)
        self.cap = self.max_value_bytes
        self.cpu_soft = _apply_limits(cpu, address_space)
        try:
            self.ballast = bytearray(_BALLAST_BYTES)
        except MemoryError:
            raise _LimitError(
                "bootstrap: applying resource limits failed: addressSpaceBytes %d leaves no room for the bootstrap"
                % address_space
            ) from None

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
        bridge = _Bridge(self.channel)
        self.bridge = bridge
        classes = {}
        proxies = []
        for global_name, names, ec in spaces:
            cls = prop = None
            if ec is not None:
                cls = classes.get(ec[0])
                if cls is None:
                    cls = classes[ec[0]] = _make_error_class(ec[0], ec[1])
                elif not hasattr(cls, ec[1]):
                    setattr(cls, ec[1], None)
                prop = ec[1]
            members = [(n, bridge.make_member(global_name, n, cls, prop)) for n in names]
            proxies.append((global_name, _make_namespace(global_name, members)))
        g.update(classes)
        for global_name, proxy in proxies:
            g[global_name] = proxy
        self.module = module
        self.ledger = _Ledger(self.channel, max_log)
        self.channel.send(b'{"type":"boot-ack"}\n')

    def wait_for_run(self):
        """Wait for run; return its frame.

        A host sends run as soon as it reads boot-ack, unless the child is one
        its pool keeps for later. A child that has waited _WARM_AFTER ms is
        taken for the latter and warms up while it waits: it imports asyncio,
        a part at a time, looking for run after each, and makes the event loop,
        so that a program that needs one starts as soon as one that does not."""
        channel = self.channel
        timeout = _WARM_AFTER
        while True:
            frame = channel.read_frame(timeout)
            if frame is _IDLE:
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
            pass  # the program that needs asyncio will meet the trouble itself
        return None

    def run(self):
        """Wait for run, then run the program; never returns."""
        frame = self.wait_for_run()
        source = frame.get("program")
        if type(source) is not str:
            raise _BootError("bootstrap: invalid run frame: program must be a string")
        self.lines = _LINE_SPLIT.split(source)
        _sys.stdout = _LogStream(self.ledger, "<stdout>", 1)
        _sys.stderr = _LogStream(self.ledger, "<stderr>", 2)
        _modules["__main__"] = self.module
        g = self.globals
        try:
            code, star, needs_loop = _compile(source)
            if needs_loop:
                _load_asyncio()
                if self.loop is None:
                    self.loop = _new_event_loop()
            exec(code, g)
            fn = g.pop("<module>")
            coro = fn(**{_STAR_HELPER: _star_importer(g)}) if star else fn()
            del fn
        except BaseException as e:
            self.complete(False, e)
        if needs_loop:
            self.run_on_loop(coro)
        self.drive(coro)

    def drive(self, coro):
        """Run the program's coroutine without an event loop; never returns.

        Binding calls wait in place (_Bridge.call), so the coroutine suspends
        only for something else: a bare yield (asyncio.sleep(0), a
        types.coroutine) resumes it at once, as a loop with nothing else to do
        would; anything else it awaits needs an event loop, which this mode
        does not have: a RuntimeError saying so is thrown in at the await."""
        complete = self.complete
        send = coro.send
        throw = coro.throw
        error = None
        while True:
            try:
                if error is None:
                    yielded = send(None)
                else:
                    yielded, error = throw(error), None
            except StopIteration as e:
                complete(True, e.value)
            except BaseException as e:
                complete(False, e)
            if yielded is not None:
                error = RuntimeError(_NO_LOOP % _class_name(type(yielded)))
                yielded = None

    def run_on_loop(self, coro):
        """Run the program's coroutine on the event loop; never returns."""
        loop = self.loop
        _set_event_loop(loop)
        bridge = self.bridge
        bridge.loop = loop
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


def main(argv=()):
    """Run one program on fd 3 and exit; never returns. The program takes no arguments."""
    if argv:
        _os.write(2, f"kiln program: unexpected arguments {argv!r}\n".encode("utf-8", "replace"))
        _os._exit(2)
    child = None
    try:
        child = _Child()
        try:
            child.boot()
            child.run()
        except (_BootError, _LimitError) as e:
            child.send_error("exception", str(e))  # exits
    except BaseException:
        pass
    try:
        if child is not None:
            child.channel.final(_UNRENDERABLE)
        else:
            _write(PROTOCOL_FD, _UNRENDERABLE)
    except BaseException:
        pass
    _exit(0)
