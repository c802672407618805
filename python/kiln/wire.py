"""The runtime control protocol v1, mirrored from the Go host's ``internal/wire``.

Frames are four big-endian length bytes and a UTF-8 JSON payload. ``decode`` judges a
payload exactly as the Go decoder does (docs/protocol.md, "How a payload is judged"): the
same checks in the same order, the first failure reported as a reason and a JSON pointer.
"""
import base64 as _b64
import json
import re

VERSION = 1

MAX_FRAME_SIZE = 1048576
MAX_CODE_BYTES = 262144
MAX_OUTPUT_BYTES = 65536
MAX_OUTPUT_RECORDS = 256
MAX_DISPLAY_BYTES = 8 << 20  # kiln's extension: a cell's display data, all its MIME values
MAX_DISPLAY_ITEMS = 32  # kiln's extension: a cell's displays
MAX_ERROR_BYTES = 65536
MAX_EXCEPTION_TYPE_BYTES = 1024  # kiln's extension: the type name of a structured exception
MAX_IDENTIFIER_LEN = 128

# Message kinds.
HELLO = "hello"
EXECUTE = "execute"
INVOKE = "invoke"
HOST_REQUEST = "host_request"
HOST_REPLY = "host_reply"
COMPLETED = "completed"
INTERRUPT = "interrupt"
SHUTDOWN = "shutdown"
OUTPUT = "output"  # kiln's extension: a running cell's stdout or stderr, as produced
DISPLAY = "display"  # kiln's extension: a running cell's rich display, a MIME bundle
COMPLETE = "complete"  # kiln's extension: the names completing a text, asked of an idle worker

# Worker roles.
ROLE_WORKBENCH = "workbench"
ROLE_HOOKS = "hooks"

# Cell statuses.
STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_YIELDED = "yielded"
STATUS_INTERRUPTED = "interrupted"

# Output streams.
STREAM_STDOUT = "stdout"
STREAM_STDERR = "stderr"
STREAM_RESULT = "result"
STREAM_DISPLAY = "display"  # kiln's extension: a display's place in a completion's output

# Result kinds of a completed message, and reply kinds of a host_reply.
RESULT_CELL = "cell"
RESULT_HOOK = "hook"
RESULT_FAILED = "failed"
RESULT_COMPLETION = "completion"  # kiln's extension: the answer to a complete
MAX_COMPLETE_BYTES = 4096
MAX_MATCHES = 1000
MAX_MATCH_BYTES = 1024
REPLY_OK = "ok"
REPLY_ERROR = "error"

# The deepest nesting of arrays and objects the Go decoder accepts.
_MAX_DEPTH = 10000
_INT64_MAX = (1 << 63) - 1

_IDENTIFIER = re.compile(r"[A-Za-z0-9_.-]{1,%d}" % MAX_IDENTIFIER_LEN)


def valid_identifier(text):
    """Report whether text is an identifier: 1..128 ASCII letters, digits, '_', '.' or '-'."""
    return _IDENTIFIER.fullmatch(text) is not None


# --- Frames ------------------------------------------------------------------------------

class FrameError(Exception):
    """A stream that cannot yield another frame; no later frame may be read from it."""


class FrameSizeError(FrameError):
    """A length prefix of 0 or above MAX_FRAME_SIZE (or a payload of such a size)."""


class TruncatedFrameError(FrameError):
    """A stream that ended inside a length prefix or a payload."""


class EndOfStream(FrameError):
    """A stream that ended cleanly, between two frames."""


def read_frame(stream):
    """Read one frame from a binary file (e.g. ``socket.makefile("rb")``); return its payload.

    The length is checked before any payload byte is read.
    """
    prefix = _read_exactly(stream, 4)
    if not prefix:
        raise EndOfStream("stream ended between frames")
    if len(prefix) < 4:
        raise TruncatedFrameError("stream ended inside a length prefix")
    size = int.from_bytes(prefix, "big")
    if size == 0 or size > MAX_FRAME_SIZE:
        raise FrameSizeError(f"frame length {size} out of range 1..{MAX_FRAME_SIZE}")
    payload = _read_exactly(stream, size)
    if len(payload) < size:
        raise TruncatedFrameError(f"stream ended after {len(payload)} of {size} payload bytes")
    return payload


def _read_exactly(stream, size):
    """Read size bytes, or fewer only where the stream ends."""
    data = stream.read(size)
    if len(data) == size or not data:
        return data
    buf = bytearray(data)
    while len(buf) < size:
        more = stream.read(size - len(buf))
        if not more:
            break
        buf += more
    return bytes(buf)


class FrameSplitter:
    """Cuts frames out of bytes received in arbitrary pieces, for a reader that must not block.

    Each length is checked as soon as its four bytes are in, before any payload is awaited.
    """

    def __init__(self):
        self._buffer = bytearray()

    def feed(self, data):
        """Add received bytes."""
        self._buffer += data

    def next(self):
        """Return the next whole frame's payload, or None until more bytes are fed."""
        buffer = self._buffer
        if len(buffer) < 4:
            return None
        size = int.from_bytes(buffer[:4], "big")
        if size == 0 or size > MAX_FRAME_SIZE:
            raise FrameSizeError(f"frame length {size} out of range 1..{MAX_FRAME_SIZE}")
        end = 4 + size
        if len(buffer) < end:
            return None
        payload = bytes(buffer[4:end])
        del buffer[:end]
        return payload

    def partial(self):
        """Report whether bytes of an unfinished frame are held."""
        return bool(self._buffer)


def pack_frame(payload):
    """Return payload as one frame: its length prefix, then the payload."""
    if not payload or len(payload) > MAX_FRAME_SIZE:
        raise FrameSizeError(f"payload of {len(payload)} bytes out of range 1..{MAX_FRAME_SIZE}")
    return len(payload).to_bytes(4, "big") + payload


def write_frame(sock, payload):
    """Send payload as one frame on a connected socket."""
    sock.sendall(pack_frame(payload))


# --- Encoding ----------------------------------------------------------------------------

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode(session_id, generation, kind, fields):
    """Return the compact UTF-8 JSON payload of one message of kind with fields.

    Raises ValueError or TypeError for what JSON cannot carry (NaN, lone surrogates, ...).
    """
    message = {"kind": kind}
    message.update(fields)
    envelope = {"version": VERSION, "session_id": session_id, "generation": generation,
                "message": message}
    return _ENCODER.encode(envelope).encode("utf-8")


_quote = json.encoder.encode_basestring  # a JSON string literal, non-ASCII kept as it is


def encode_host_request(session_id, generation, request_id, execution_id, request):
    """Return the payload of a host_request: what ``encode`` gives for it, byte for byte,
    made without building the envelope, since a cell may make many. It stays because it
    won its A/B against its removal (docs/host.md, "CPUs").

    Raises ValueError or TypeError for a request JSON cannot carry.
    """
    if len(request) == 1 and type(request.get("method")) is str:  # a method alone, the commonest
        body = '{"method":%s}' % _quote(request["method"])
    else:
        body = _ENCODER.encode(request)
    return ('{"version":%d,"session_id":%s,"generation":%s,"message":{"kind":"%s","id":%s,'
            '"execution_id":%s,"request":%s}}' % (
                VERSION, _quote(session_id), _quote(generation), HOST_REQUEST, _quote(request_id),
                _quote(execution_id), body,
            )).encode("utf-8")


# --- Decoding ----------------------------------------------------------------------------

class DecodeError(Exception):
    """A refused payload: where (a JSON pointer, empty for the whole payload) and why."""

    def __init__(self, pointer, reason, detail):
        super().__init__(f"wire: {pointer or 'payload'}: {reason}: {detail}")
        self.pointer = pointer
        self.reason = reason
        self.detail = detail


class _Duplicate(Exception):
    """An object named one member twice."""


class _Invalid(Exception):
    """The text is not strict JSON."""


def _unique_members(pairs):
    members = dict(pairs)
    if len(members) != len(pairs):
        raise _Duplicate
    return members


def _no_constant(name):
    raise _Invalid(f"{name} is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_members, parse_constant=_no_constant)


def decode(payload, session_id, generation):
    """Judge payload strictly; return ``(kind, message)``, the message a dict with its kind.

    session_id and generation are the identity every envelope must carry. A refusal raises
    DecodeError with the reason and pointer the Go decoder gives.
    """
    envelope = _parse(payload)
    _check_members(envelope, "", {
        "version": _version,
        "session_id": _identity(session_id),
        "generation": _identity(generation),
        "message": _object,
    })
    message = envelope["message"]
    _check_union(message, "/message", _MESSAGES)
    return message["kind"], message


class Decoder:
    """``decode`` for one worker identity, which first looks for the frame a worker reads
    most often, an ok host_reply, in the shape the host writes it, member for member: such
    a frame needs only its reply's value parsed (as strictly as ``decode`` parses it), not
    the whole envelope judged. It stays because it won its A/B against its removal
    (docs/host.md, "CPUs"); an execute is judged in full."""

    _ID = rb'([A-Za-z0-9_.-]{1,%d})' % MAX_IDENTIFIER_LEN
    _REPLY_REST = re.compile(_ID + rb'","execution_id":"' + _ID + rb'","reply":\{"kind":"%s","value":'
                             % REPLY_OK.encode())

    def __init__(self, session_id, generation):
        self._session_id = session_id
        self._generation = generation
        head = '{"version":%d,"session_id":%s,"generation":%s,"message":{"kind":"' % (
            VERSION, _quote(session_id), _quote(generation))
        self._reply_head = (head + HOST_REPLY + '","id":"').encode("utf-8")

    def decode(self, payload):
        """Return ``(kind, message)`` as ``decode`` does, refusing what it refuses."""
        message = self.plain(payload)
        if message is not None:
            return message["kind"], message
        return decode(payload, self._session_id, self._generation)

    def plain(self, payload):
        """Return the message of payload if it is an ok host_reply in the host's own shape,
        else None."""
        if payload.startswith(self._reply_head) and payload.endswith(b"}}}"):
            rest = self._REPLY_REST.match(payload, len(self._reply_head))
            value = _plain_value(payload[rest.end():-3], _NO_VALUE, _REPLY_VALUE_DEPTH) if rest else _NO_VALUE
            if value is not _NO_VALUE:
                return {"kind": HOST_REPLY, "id": rest[1].decode(), "execution_id": rest[2].decode(),
                        "reply": {"kind": REPLY_OK, "value": value}}
        return None


_NO_VALUE = object()  # what _plain_value returns for text it does not plainly accept

# The nesting a reply's value may have: the Go decoder's, less the envelope, its message
# and the reply around the value.
_REPLY_VALUE_DEPTH = _MAX_DEPTH - 3


def _plain_value(data, otherwise=None, depth=_MAX_DEPTH):
    """Return the one JSON value data holds if the quick parser reads it exactly as
    ``decode`` would, nested at most depth deep, else otherwise.

    The quick parser's own nesting bound is the interpreter's (about 1000 before 3.13,
    about 10000 since), so the bound is checked here: a value with fewer brackets than
    depth cannot be nested deeper, and one with more is measured."""
    if b"\\u" in data and (b"\\ud" in data or b"\\uD" in data):  # json accepts lone surrogates
        return otherwise
    try:
        text = data.decode("utf-8")
        value, end = _scan_once(text, 0)  # no space around it, as the host writes it
    except Exception:  # decode finds what is wrong, and says it exactly
        return otherwise
    if end != len(text):
        return otherwise
    if data.count(b"[") + data.count(b"{") > depth and _nesting(value) > depth:
        return otherwise
    return value


def _nesting(value):
    """Return how deeply value's lists and dicts nest, without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in item if isinstance(child, (list, dict)))
    return deepest


_scan_once = _DECODER.scan_once  # one value at an index: decode without its spaces skipped


def parse_json(data):
    """Return the one strict JSON value of the bytes data, as the host reads JSON; raise
    DecodeError for anything else (a duplicate name, NaN, a lone surrogate escape, text
    around the value, nesting past the host's bound)."""
    return _parse(data)


def _parse(payload):
    """Return the one strict JSON value of payload, or raise a syntax or duplicate refusal."""
    try:
        value = _DECODER.decode(payload.decode("utf-8"))
    except Exception:  # every failure is judged again, exactly, by the slow path
        return _parse_exactly(payload)
    if b"\\ud" in payload or b"\\uD" in payload:  # json accepts lone surrogate escapes
        return _parse_exactly(payload)
    return value


def _parse_exactly(payload):
    """Parse payload the way the Go decoder reads it: the first error in byte order wins."""
    try:
        text = payload.decode("utf-8")
        valid = True
    except UnicodeDecodeError as err:
        text = payload[:err.start].decode("utf-8")  # what precedes the first invalid byte
        valid = False
    try:
        value = _scan(text)
    except _Duplicate:
        raise DecodeError("", "duplicate", "an object names one member twice") from None
    except (_Invalid, ValueError) as err:
        raise DecodeError("", "syntax", str(err) or "not JSON") from None
    if not valid:
        raise DecodeError("", "syntax", "invalid UTF-8")
    return value


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_SURROGATE = re.compile("[\ud800-\udfff]")
_LITERALS = (("true", True), ("false", False), ("null", None))


def _scan(text):
    """Parse text as one strict JSON value, iteratively, checking names as they are read."""
    skip = _WHITESPACE.match
    stack = []  # open containers: [list or dict, name awaiting its value]
    pos = skip(text).end()
    while True:
        char = text[pos:pos + 1]
        if char in ("{", "["):
            if len(stack) == _MAX_DEPTH:
                raise _Invalid("nesting too deep")
            pos = skip(text, pos + 1).end()
            closer = "}" if char == "{" else "]"
            if text.startswith(closer, pos):
                value, pos = ({} if char == "{" else []), pos + 1
            elif char == "{":
                entry = [{}, None]
                stack.append(entry)
                entry[1], pos = _scan_name(text, pos, entry[0])
                continue
            else:
                stack.append([[], None])
                continue
        else:
            value, pos = _scan_scalar(text, pos)
        while True:  # give the value to its container, closing containers as they end
            if not stack:
                if skip(text, pos).end() != len(text):
                    raise _Invalid("data after the value")
                return value
            entry = stack[-1]
            container = entry[0]
            if entry[1] is None:
                container.append(value)
            else:
                container[entry[1]] = value
            pos = skip(text, pos).end()
            char = text[pos:pos + 1]
            if char == ",":
                pos = skip(text, pos + 1).end()
                if entry[1] is not None:
                    entry[1], pos = _scan_name(text, pos, container)
                break
            if char != ("]" if entry[1] is None else "}"):
                raise _Invalid(f"unexpected {char!r} after a value" if char else "unexpected end")
            stack.pop()
            value, pos = container, pos + 1


def _scan_name(text, pos, members):
    """Read a member name and its colon; refuse a name members already holds."""
    if not text.startswith('"', pos):
        raise _Invalid("expecting a member name")
    name, pos = _scan_string(text, pos)
    if name in members:
        raise _Duplicate
    pos = _WHITESPACE.match(text, pos).end()
    if not text.startswith(":", pos):
        raise _Invalid("expecting ':'")
    return name, _WHITESPACE.match(text, pos + 1).end()


def _scan_string(text, pos):
    value, pos = json.decoder.scanstring(text, pos + 1, True)
    if _SURROGATE.search(value):
        raise _Invalid("lone surrogate escape")
    return value, pos


def _scan_scalar(text, pos):
    """Read a string, number or literal at pos; return it and the position after it."""
    if text.startswith('"', pos):
        return _scan_string(text, pos)
    number = _NUMBER.match(text, pos)
    if number:
        token = number.group()
        if number.group(1) or number.group(2):
            return float(token), number.end()
        return _integer(token), number.end()
    for word, value in _LITERALS:
        if text.startswith(word, pos):
            return value, pos + len(word)
    raise _Invalid("expecting a value")


def _integer(token):
    try:
        return int(token)
    except ValueError:  # beyond int's digit limit for strings; decimal has none
        import decimal
        return int(decimal.Decimal(token))


# Field checks: each takes a value and its pointer, and refuses it with a DecodeError.

def _pointer(ptr, name):
    """Return ptr extended by the member name, escaped as a JSON pointer token."""
    return ptr + "/" + name.replace("~", "~0").replace("/", "~1")


def _check_members(value, ptr, fields, skip=None):
    """Check an object against fields (name -> check): unknown, missing, then each field.

    The schema's own names need no pointer escaping.
    """
    _object(value, ptr)
    unknown = [name for name in value if name not in fields and name != skip]
    if unknown:
        raise DecodeError(_pointer(ptr, min(unknown)), "unknown", "unknown member")
    for name in fields:
        if name not in value:
            raise DecodeError(f"{ptr}/{name}", "missing", "required member absent")
    for name, check in fields.items():
        check(value[name], f"{ptr}/{name}")


def _check_union(value, ptr, kinds):
    """Check an object whose "kind" selects its fields from kinds (kind -> fields)."""
    _object(value, ptr)
    if "kind" not in value:
        raise DecodeError(ptr + "/kind", "missing", "required member absent")
    kind = value["kind"]
    _string(kind, ptr + "/kind")
    fields = kinds.get(kind)
    if fields is None:
        raise DecodeError(ptr + "/kind", "value", f"unknown kind {kind!r}")
    _check_members(value, ptr, fields, "kind")


def _union(kinds):
    return lambda value, ptr: _check_union(value, ptr, kinds)


def _object(value, ptr):
    if type(value) is not dict:
        raise DecodeError(ptr, "type", "want an object")


def _any(value, ptr):
    pass


def _string(value, ptr):
    if type(value) is not str:
        raise DecodeError(ptr, "type", "want a string")


def _utf8_len(text):
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _text(limit):
    def check(value, ptr):
        _string(value, ptr)
        if len(value) > limit or _utf8_len(value) > limit:
            raise DecodeError(ptr, "value", f"more than {limit} bytes")
    return check


def _ident(value, ptr):
    _string(value, ptr)
    if not valid_identifier(value):
        raise DecodeError(ptr, "value", f"{value!r} is not 1..128 of [A-Za-z0-9_.-]")


def _identity(want):
    def check(value, ptr):
        _ident(value, ptr)
        if value != want:
            raise DecodeError(ptr, "mismatch", f"{value!r}, want {want!r}")
    return check


def _nullable(check):
    return lambda value, ptr: None if value is None else check(value, ptr)


def _word(*words):
    def check(value, ptr):
        _string(value, ptr)
        if value not in words:
            raise DecodeError(ptr, "value", f"{value!r} is not one of {words}")
    return check


def _array(value, ptr):
    if type(value) is not list:
        raise DecodeError(ptr, "type", "want an array")


def _identifiers(value, ptr):
    _array(value, ptr)
    for i, item in enumerate(value):
        _ident(item, f"{ptr}/{i}")


def _version(value, ptr):
    if type(value) is not int:
        raise DecodeError(ptr, "type", "want an integer")
    if value != VERSION:
        raise DecodeError(ptr, "mismatch", f"want version {VERSION}")


def _count(value, ptr):
    if type(value) is not int:
        raise DecodeError(ptr, "type", "want an integer")
    if not 0 <= value <= _INT64_MAX:
        raise DecodeError(ptr, "value", f"not in 0..{_INT64_MAX}")


_RECORD = {"stream": _word(STREAM_STDOUT, STREAM_STDERR, STREAM_RESULT), "text": _string}
_PLACE = {"stream": _string}  # a display's place: the display came in its own frame


def _output(value, ptr):
    _array(value, ptr)
    if len(value) > MAX_OUTPUT_RECORDS + MAX_DISPLAY_ITEMS:
        raise DecodeError(ptr, "value", f"{len(value)} records, more than "
                          f"{MAX_OUTPUT_RECORDS + MAX_DISPLAY_ITEMS}")
    total = texts = places = 0
    for i, record in enumerate(value):
        where = f"{ptr}/{i}"
        if type(record) is dict and record.get("stream") == STREAM_DISPLAY:
            _check_members(record, where, _PLACE)
            places += 1
            if places > MAX_DISPLAY_ITEMS:
                raise DecodeError(where, "value", f"more than {MAX_DISPLAY_ITEMS} displays")
            continue
        _check_members(record, where, _RECORD)
        texts += 1
        if texts > MAX_OUTPUT_RECORDS:
            raise DecodeError(where, "value", f"more than {MAX_OUTPUT_RECORDS} text records")
        total += _utf8_len(record["text"])
        if total > MAX_OUTPUT_BYTES:
            raise DecodeError(where + "/text", "value",
                              f"output text totals more than {MAX_OUTPUT_BYTES} bytes")


def _matches(value, ptr):
    _array(value, ptr)
    if len(value) > MAX_MATCHES:
        raise DecodeError(ptr, "value", f"{len(value)} matches, more than {MAX_MATCHES}")
    check = _text(MAX_MATCH_BYTES)
    for i, match in enumerate(value):
        check(match, f"{ptr}/{i}")


_DISPLAY_TEXT = ("text/plain", "text/html", "text/markdown", "text/latex", "application/json",
                 "image/svg+xml")
_DISPLAY_BINARY = ("image/png", "image/jpeg")


def standard_base64(text):
    """Report whether the str text is standard base64 as the host's strict decoder reads
    it: padded, its unused trailing bits zero (``AB==`` is not: ``AA==`` is), CR and LF
    ignored."""
    if "\r" in text or "\n" in text:
        text = text.replace("\r", "").replace("\n", "")
    try:
        data = text.encode("ascii")
        return _b64.b64encode(_b64.b64decode(data, validate=True)) == data
    except (UnicodeEncodeError, ValueError):
        return False


def _display_data(value, ptr):
    """Check a MIME bundle: known types, string values, text/plain present, images base64."""
    if type(value) is not dict:
        raise DecodeError(ptr, "type", "want an object")
    for mime in sorted(value):
        where = f"{ptr}/" + mime.replace("~", "~0").replace("/", "~1")
        if mime not in _DISPLAY_TEXT and mime not in _DISPLAY_BINARY:
            raise DecodeError(where, "unknown", f"{mime!r} is not a known MIME type")
        _string(value[mime], where)
        if mime in _DISPLAY_BINARY and not standard_base64(value[mime]):
            raise DecodeError(where, "value", "not standard base64")
    if "text/plain" not in value:
        raise DecodeError(ptr, "missing", "no 'text/plain'")


_REPLIES = {
    REPLY_OK: {"value": _any},
    REPLY_ERROR: {"code": _ident, "message": _string},
}

_CELL = {
    "status": _word(STATUS_OK, STATUS_ERROR, STATUS_YIELDED, STATUS_INTERRUPTED),
    "output": _output,
    "truncated_bytes": _count,
    "error": _nullable(_text(MAX_ERROR_BYTES)),
}

_EXCEPTION = {"type": _text(MAX_EXCEPTION_TYPE_BYTES), "value": _text(MAX_ERROR_BYTES),
              "traceback": _text(MAX_ERROR_BYTES)}


def _result(value, ptr):
    """Check a completed result; a cell result's "exception" is optional."""
    kinds = _RESULTS
    if type(value) is dict and "exception" in value:
        kinds = dict(_RESULTS)
        kinds[RESULT_CELL] = dict(_CELL, exception=lambda v, p: _check_members(v, p, _EXCEPTION))
    _check_union(value, ptr, kinds)


_RESULTS = {
    RESULT_CELL: _CELL,
    RESULT_HOOK: {"value": _any},
    RESULT_FAILED: {"error": _text(MAX_ERROR_BYTES)},
    RESULT_COMPLETION: {"matches": _matches},
}

_MESSAGES = {
    HELLO: {"token": _ident, "role": _word(ROLE_WORKBENCH, ROLE_HOOKS),
            "revision": _nullable(_ident), "slots": _identifiers},
    EXECUTE: {"id": _ident, "code": _text(MAX_CODE_BYTES)},
    INVOKE: {"id": _ident, "slot": _ident, "input": _object},
    HOST_REQUEST: {"id": _ident, "execution_id": _ident, "request": _object},
    HOST_REPLY: {"id": _ident, "execution_id": _ident, "reply": _union(_REPLIES)},
    COMPLETED: {"id": _ident, "result": _result},
    COMPLETE: {"id": _ident, "text": _text(MAX_COMPLETE_BYTES)},
    OUTPUT: {"execution_id": _ident, "stream": _word(STREAM_STDOUT, STREAM_STDERR),
             "text": _text(MAX_OUTPUT_BYTES)},
    DISPLAY: {"execution_id": _ident, "data": _display_data, "dropped": _count},
    INTERRUPT: {"id": _ident},
    SHUTDOWN: {},
}
