"""What a cell prints: its bounded output ledger, and the streams that stand in for stdout/stderr.

A cell returns at most MAX_OUTPUT_BYTES of UTF-8 text across at most MAX_OUTPUT_RECORDS
records. Whatever does not fit is counted in ``truncated_bytes`` and dropped as it is
written, never held; once any text is dropped, all text after it is dropped too, so the
kept text has no gaps. The cell's displays (kiln.display, bounded there) take their places
among the text records, in the order they were shown.

What a cell keeps of stdout and stderr is also streamed to the host while it runs (kiln's
``output`` frames): a line is sent at once when none was sent in the last STREAM_SECONDS,
else with what follows it within that window; a partial line waits a whole window for its
end; STREAM_BYTES pending, or a flush(), send it at once. A display is sent at once, after
the text written before it. Whatever is pending when the cell ends is sent before its
completion, so the chunks, merged by stream between displays, are exactly the completion's
stdout and stderr records, and the displays come where the completion places them.
"""
import codecs
import io
import os
import threading
import time

from kiln.wire import MAX_ERROR_BYTES, MAX_OUTPUT_BYTES, MAX_OUTPUT_RECORDS, STREAM_DISPLAY

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


# Streaming: how long text may wait to be sent, and how much may wait.
STREAM_SECONDS = 0.05
STREAM_BYTES = 8192

_STREAMED = ("stdout", "stderr")


class Ledger:
    """The output records of one cell. Not thread-safe: OutputRouter serialises writers."""

    def __init__(self):
        # [stream, [text, ...]]: a record's text, in pieces; [STREAM_DISPLAY, None]: the
        # place of a display.
        self._records = []
        self._texts = 0  # the text records among them
        self._size = 0
        self.truncated_bytes = 0

    def write(self, stream, text):
        """Append text to stream's output, merging with the last record if it is the same;
        return what of text was kept, and its UTF-8 size."""
        if not text:
            return "", 0
        if self.truncated_bytes:
            self.truncated_bytes += _utf8_size(text)
            return "", 0
        records = self._records
        merge = bool(records) and records[-1][0] == stream
        if not merge and self._texts == MAX_OUTPUT_RECORDS:
            self.truncated_bytes = _utf8_size(text)
            return "", 0
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
                self._texts += 1
            self._size += kept_size
        self.truncated_bytes += total - kept_size
        return kept, kept_size

    def display(self):
        """Place a display after what was written so far: text after it starts a new record.
        The display bounds (kiln.display) keep the places few."""
        self._records.append([STREAM_DISPLAY, None])

    def records(self):
        """Return the records as the wire carries them: ``{"stream", "text"}`` for text,
        ``{"stream": "display"}`` for a display's place."""
        return [{"stream": stream} if pieces is None else {"stream": stream, "text": "".join(pieces)}
                for stream, pieces in self._records]


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
    """Sends captured text to the running cell's ledger; with no cell running, it says so.

    Given a sender, it also streams what the ledger keeps of stdout and stderr, and the
    cell's displays. The sender is called as ``sender(take)`` and returns whether it sent:
    it calls ``take()`` for ``(cell_id, [(stream, body), ...])``, the runs pending, each
    body a text or, for STREAM_DISPLAY, a display's frame, and writes them in order, or,
    when it cannot write now (its thread is inside a write already), returns False
    without calling it, and the runs wait for the next flush.
    """

    def __init__(self, sender=None):
        self._lock = threading.RLock()  # reentrant: a signal handler may print mid-write
        self._ledger = None
        self._sender = sender
        self._cell_id = None
        # [stream, [text, ...]]: kept text not yet streamed, in runs; [STREAM_DISPLAY,
        # frame]: a display not yet sent.
        self._pending = []
        self._pending_size = 0
        self._sent_at = 0.0  # time.monotonic() of the last flush
        # Text left waiting is flushed at _due (a time.monotonic()), by one thread made at
        # the first such wait and kept: a thread per wait would cost each printing cell one.
        self._due = None
        self._timer = None  # that thread
        self._armed = threading.Condition(self._lock)
        # Held while one flush takes and sends, so chunks leave in the order written.
        self._flush_lock = threading.Lock()
        self._flusher = None  # the thread inside a flush

    def attach(self, ledger, cell_id=None):
        """Make ledger, of cell cell_id, the destination of everything captured from now on."""
        with self._lock:
            self._ledger = ledger
            self._cell_id = cell_id

    def detach(self):
        """Stop capturing into the current ledger, stream what is pending, and return it."""
        with self._lock:
            ledger, self._ledger = self._ledger, None
        self.flush()
        if self._flusher != threading.get_ident():
            # A flush another thread began has taken its runs: they leave before the
            # cell's completion does.
            with self._flush_lock:
                pass
        return ledger

    def emit(self, stream, text):
        """Write text to stream of the attached ledger; return False if none is attached."""
        with self._lock:
            if self._ledger is None:
                return False
            kept, size = self._ledger.write(stream, text)
            if not kept or self._sender is None or stream not in _STREAMED:
                return True
            pending = self._pending
            if pending and pending[-1][0] == stream:
                pending[-1][1].append(kept)
            else:
                pending.append([stream, [kept]])
            self._pending_size += size
            wait = self._sent_at + STREAM_SECONDS - time.monotonic()
            now = self._pending_size >= STREAM_BYTES or (wait <= 0 and "\n" in kept)
            if not now:
                self._arm(wait if wait > 0 else STREAM_SECONDS)
        if now:
            self.flush()
        return True

    def show(self, cell_id, frame):
        """Place a display, its frame made for cell cell_id, in the running cell's output
        after what was written before, and send it; return False, doing nothing, when
        cell_id is not the running cell."""
        with self._lock:
            if self._ledger is None or self._cell_id != cell_id:
                return False
            self._ledger.display()
            if self._sender is None:
                return True
            self._pending.append([STREAM_DISPLAY, frame])
        self.flush()
        return True

    def _arm(self, wait):
        """Arm a flush wait seconds from now, unless one is armed; self._lock is held."""
        if self._due is not None:
            return
        self._due = time.monotonic() + max(wait, 0.001)
        if self._timer is None:
            self._timer = threading.Thread(target=self._flush_when_due, name="kiln-output", daemon=True)
            self._timer.start()
        else:
            self._armed.notify()

    def _flush_when_due(self):
        """The timer thread: flush at each armed time, and wait, without waking, between."""
        while True:
            with self._lock:
                while self._due is None or self._due > time.monotonic():
                    self._armed.wait(None if self._due is None else self._due - time.monotonic())
                self._due = None
            self.flush()

    def _take(self):
        with self._lock:
            runs = [(stream, pieces if stream == STREAM_DISPLAY else "".join(pieces))
                    for stream, pieces in self._pending]
            self._pending, self._pending_size = [], 0
            self._sent_at = time.monotonic()
            return self._cell_id, runs

    def flush(self):
        """Stream what is pending now; report whether nothing is left pending."""
        if not self._pending:
            return True
        me = threading.get_ident()
        if self._flusher == me:  # a signal handler printing inside this thread's flush
            return False
        with self._flush_lock:
            self._flusher = me
            try:
                sent = not self._pending or self._sender(self._take)
            finally:
                self._flusher = None
        if not sent:
            with self._lock:
                self._arm(STREAM_SECONDS)
        return sent


class CaptureStream(io.TextIOBase):
    """A text stream (sys.stdout or sys.stderr) that writes into the running cell's output.

    With no cell running, text goes to the real file descriptor, which the host drains.
    """

    def __init__(self, router, stream, fd):
        super().__init__()
        self._router = router
        self._stream = stream
        self._fd = fd
        self._buffer = _BinaryStream(self)

    @property
    def buffer(self):
        """The binary stream under the text: bytes written to it are decoded as UTF-8
        (a character split across writes is kept until it is whole) and written here."""
        return self._buffer

    @property
    def line_buffering(self):
        """Every write goes out at once, as with line buffering."""
        return True

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
        """Stream to the host what the running cell wrote and was not yet sent."""
        self._router.flush()

    def isatty(self):
        """Captured output is never a terminal."""
        return False

    def fileno(self):
        """Return the real descriptor (1 or 2) behind the stream."""
        return self._fd


class _BinaryStream(io.RawIOBase):
    """The ``buffer`` of a CaptureStream: bytes in, UTF-8 text out to the text stream."""

    def __init__(self, text):
        super().__init__()
        self._text = text
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._lock = threading.Lock()

    @property
    def name(self):
        """The text stream's name."""
        return self._text.name

    def writable(self):
        """The buffer is writable."""
        return True

    def write(self, b):
        """Decode b, holding back a character it splits, and write the text; return len(b)."""
        data = memoryview(b).cast("B")
        with self._lock:
            text = self._decoder.decode(data)
        if text:
            self._text.write(text)
        return len(data)

    def flush(self):
        """Flush the text stream."""
        self._text.flush()

    def isatty(self):
        """Captured output is never a terminal."""
        return False

    def fileno(self):
        """The real descriptor behind the text stream."""
        return self._text.fileno()
