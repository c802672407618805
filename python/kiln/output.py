"""What a cell prints: its bounded output ledger, and the streams that stand in for stdout/stderr.

A cell returns at most MAX_OUTPUT_BYTES of UTF-8 text across at most MAX_OUTPUT_RECORDS
records. Whatever does not fit is counted in ``truncated_bytes`` and dropped as it is
written, never held; once anything is dropped, everything after it is dropped too, so the
kept output has no gaps.
"""
import io
import os
import threading

from kiln.wire import MAX_ERROR_BYTES, MAX_OUTPUT_BYTES, MAX_OUTPUT_RECORDS

TRUNCATION_MARKER = "… [truncated]"

# Non-ASCII text is measured this many code points at a time, so measuring never copies a
# huge string whole.
_MEASURE_CHUNK = 1 << 16


def _encode(text):
    return text.encode("utf-8", "replace")


def _utf8_size(text, start=0):
    """Return the UTF-8 size of text[start:], a lone surrogate counted as its replacement."""
    if text.isascii():
        return len(text) - start
    return sum(len(_encode(text[i:i + _MEASURE_CHUNK]))
               for i in range(start, len(text), _MEASURE_CHUNK))


def _head(data, limit):
    """Return the longest prefix of UTF-8 data, at most limit bytes, ending on a code point."""
    if len(data) <= limit:
        return data
    while limit and data[limit] & 0xC0 == 0x80:  # a continuation byte: back up
        limit -= 1
    return data[:limit]


class Ledger:
    """The output records of one cell. Not thread-safe: OutputRouter serialises writers."""

    def __init__(self):
        self._records = []  # [stream, [text, ...]]: a record's text, in pieces
        self._size = 0
        self.truncated_bytes = 0

    def write(self, stream, text):
        """Append text to stream's output, merging with the last record if it is the same."""
        if not text:
            return
        if self.truncated_bytes:
            self.truncated_bytes += _utf8_size(text)
            return
        records = self._records
        merge = bool(records) and records[-1][0] == stream
        if not merge and len(records) == MAX_OUTPUT_RECORDS:
            self.truncated_bytes = _utf8_size(text)
            return
        room = MAX_OUTPUT_BYTES - self._size
        if text.isascii():
            total = len(text)
            kept = text[:room]
            kept_size = len(kept)
        else:
            head = _encode(text[:room])  # at least room bytes, unless text is shorter
            total = len(head) + _utf8_size(text, room)
            kept_bytes = _head(head, room)
            kept = kept_bytes.decode("utf-8")
            kept_size = len(kept_bytes)
        if kept:
            if merge:
                records[-1][1].append(kept)
            else:
                records.append([stream, [kept]])
            self._size += kept_size
        self.truncated_bytes += total - kept_size

    def records(self):
        """Return the records as the wire carries them: ``[{"stream", "text"}, ...]``."""
        return [{"stream": stream, "text": "".join(pieces)} for stream, pieces in self._records]


def cap_error_text(text):
    """Return text as at most MAX_ERROR_BYTES of UTF-8, cut with TRUNCATION_MARKER if longer."""
    if text.isascii() and len(text) <= MAX_ERROR_BYTES:
        return text
    data = _encode(text)
    if len(data) <= MAX_ERROR_BYTES:
        return data.decode("utf-8")
    room = MAX_ERROR_BYTES - len(TRUNCATION_MARKER.encode("utf-8"))
    return _head(data, room).decode("utf-8") + TRUNCATION_MARKER


def _write_fd(fd, text):
    """Write text to a real file descriptor, whole; text nobody can receive is dropped."""
    data = memoryview(_encode(text))
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


class OutputRouter:
    """Sends captured text to the running cell's ledger; with no cell running, it says so."""

    def __init__(self):
        self._lock = threading.RLock()  # reentrant: a signal handler may print mid-write
        self._ledger = None

    def attach(self, ledger):
        """Make ledger the destination of everything captured from now on."""
        with self._lock:
            self._ledger = ledger

    def detach(self):
        """Stop capturing into the current ledger and return it."""
        with self._lock:
            ledger, self._ledger = self._ledger, None
        return ledger

    def emit(self, stream, text):
        """Write text to stream of the attached ledger; return False if none is attached."""
        with self._lock:
            if self._ledger is None:
                return False
            self._ledger.write(stream, text)
            return True


class CaptureStream(io.TextIOBase):
    """A text stream (sys.stdout or sys.stderr) that writes into the running cell's output.

    With no cell running, text goes to the real file descriptor, which the host drains.
    """

    def __init__(self, router, stream, fd):
        super().__init__()
        self._router = router
        self._stream = stream
        self._fd = fd

    @property
    def encoding(self):
        """The encoding text is measured and sent in."""
        return "utf-8"

    @property
    def errors(self):
        """How text that UTF-8 cannot carry (lone surrogates) is encoded."""
        return "replace"

    @property
    def name(self):
        """The stream's name, as for the standard streams."""
        return f"<{self._stream}>"

    def writable(self):
        """Capture streams are writable."""
        return True

    def write(self, s):
        """Write s to the running cell's output, or to the real descriptor; return len(s)."""
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if not self._router.emit(self._stream, s):
            _write_fd(self._fd, s)
        return len(s)

    def flush(self):
        """Nothing is buffered: a no-op."""

    def isatty(self):
        """Captured output is never a terminal."""
        return False

    def fileno(self):
        """Return the real descriptor (1 or 2) behind the stream."""
        return self._fd
