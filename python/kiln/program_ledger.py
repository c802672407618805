"""The program child's logs: its ledger, and the sys.stdout and sys.stderr that
model code writes to (docs/programs.md, Logs)."""

import builtins as _builtins_module

__builtins__ = dict(vars(_builtins_module))

import _thread
import codecs as _codecs
import io as _io

from kiln import jsonplain as _jp
from kiln.program_channel import frame

_RLock = _thread.RLock
_incremental_utf8 = _codecs.getincrementaldecoder("utf-8")
_string_text = _jp.string_text
_has_surrogate = _jp.has_surrogate


class Ledger:
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
        if _has_surrogate(piece):
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
            self.channel.send(frame('{"type":"log","text":%s}' % text))
        else:
            self.open = True
            self.channel.send(frame('{"type":"log","text":%s,"open":true}' % text))

    def _truncate(self):
        self.stopped = True
        self.buffer.clear()
        self.buffered = 0
        self.channel.send(b'{"type":"log","text":"","truncated":true}\n')


class LogStream(_io.TextIOBase):
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
