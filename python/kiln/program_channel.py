"""fd 3, the program child's channel to the host, both directions.

Bound when the bootstrap imports it, before model code runs: the functions
here look builtins up in a private snapshot and call only what they bound.
"""

import builtins as _builtins_module

__builtins__ = dict(vars(_builtins_module))

import _socket
import _thread
import os as _os
import select as _select

from kiln import jsonplain as _jp

_set_blocking = _os.set_blocking
_exit = _os._exit
_poll = _select.poll
_socket_object = _socket.socket
_MSG_DONTWAIT = _socket.MSG_DONTWAIT
_SEND_FLAGS = _socket.MSG_DONTWAIT | getattr(_socket, "MSG_NOSIGNAL", 0)
_POLLIN = _select.POLLIN
_POLLOUT = _select.POLLOUT
_POLLHUP = _select.POLLHUP
_POLLERR = _select.POLLERR
_RLock = _thread.RLock
_loads_bytes = _jp.loads_bytes

#: kiln.protocol.PROTOCOL_FD, spelt out here: importing kiln.protocol costs a
#: cold child the typing module (a test checks that the two agree).
PROTOCOL_FD = 3

#: What a frame cap allows beyond the larger budget: FrameHeadroom on the host.
FRAME_HEADROOM = 1 << 20

READ_SIZE = 1 << 16  # what one read of fd 3 asks for: a buffer malloc serves without mmap
# What one wait of a writer reads into the inbox at most, in reads of READ_SIZE.
_ABSORB_READS = 16

#: read_frame: nothing came in time.
IDLE = object()


def frame_cap(max_log_bytes, max_value_bytes):
    """The most bytes one frame to the host may have, its newline aside: the host
    ends the run on a longer one."""
    return max(max_log_bytes, max_value_bytes) + FRAME_HEADROOM


def frame(text):
    """The bytes of one frame whose JSON text is text."""
    return (text + "\n").encode("utf-8")


class Channel:
    """fd 3, both directions.

    Every read and write asks not to block (MSG_DONTWAIT) and waits in poll
    instead. Frames go out whole under one lock; a frame sent from inside a
    write (a signal handler that logs) waits its turn. While a write waits for
    room it keeps reading what the host sends into the inbox, so the child
    never stops reading because it is writing, whatever the host does; a
    reader that found whole frames there has the pump woken (``wakeup``)."""

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
        self.cap = None  # the frame cap, once boot said

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

    def _wait(self, events, timeout=None):
        """Wait until fd 3 is ready for events, or timeout ms (None: no limit);
        read whatever arrives meanwhile. Whether fd 3 was ready."""
        poller = _poll()
        poller.register(self.fd, events | _POLLIN)
        ready_list = poller.poll(timeout)
        for _, ready in ready_list:
            if ready & (_POLLIN | _POLLHUP | _POLLERR):
                self.absorb()
        return bool(ready_list)

    def absorb(self):
        """Read what there is into the inbox, up to 1 MiB; whether anything
        came. EOF ends the child."""
        got = False
        for _ in range(_ABSORB_READS):
            try:
                data = self.sock_recv(READ_SIZE, _MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                _exit(1)  # the host closed the channel
            self.inbox += data
            got = self.absorbed = True
            if len(data) < READ_SIZE:
                break
        return got

    def take_lines(self):
        """The whole lines in the inbox, removed from it. Lock held."""
        inbox = self.inbox
        nl = inbox.rfind(b"\n")
        if nl < 0:
            return ()
        lines = bytes(inbox[:nl]).split(b"\n")
        del inbox[: nl + 1]
        return lines

    def read_frame(self, timeout=None):
        """Wait for one whole frame; return it decoded, None if the line is not
        a JSON object, or IDLE if fd 3 stayed quiet for timeout ms (None: no
        limit). Only for before the program runs."""
        while True:
            with self.lock:
                nl = self.inbox.find(b"\n")
                if nl >= 0:
                    line = bytes(self.inbox[:nl])
                    del self.inbox[: nl + 1]
                    return decode_frame(line)
                if not self.absorb() and not self._wait(_POLLIN, timeout):
                    return IDLE


def decode_frame(line):
    """line as a JSON object, or None."""
    try:
        value = _loads_bytes(line)
    except ValueError:
        return None
    return value if type(value) is dict else None
