"""kiln.wire against conformance/envelopes.json, which the Go decoder runs too, and frame edges."""
import io
import json
import os
import socket
import subprocess
import sys
import textwrap
import unittest

from kiln import wire

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conformance",
                       "envelopes.json")


def load_vectors():
    with open(VECTORS, encoding="utf-8") as f:
        return json.load(f)


def judged(decode, payload):
    """Return ("ok", message) or ("error", reason, pointer) for payload."""
    try:
        return ("ok", decode(payload))
    except wire.DecodeError as err:
        return ("error", err.reason, err.pointer)


def verdict(payload, expect):
    """Return ("ok",) or ("error", reason, pointer) for payload, after checking that a
    worker's Decoder, with its plain path for ok replies, judges it as decode does."""
    general = judged(lambda p: wire.decode(p, expect["session_id"], expect["generation"]), payload)
    own = judged(wire.Decoder(expect["session_id"], expect["generation"]).decode, payload)
    try:
        agree = own == general
    except RecursionError:  # messages nested too deeply to compare: compare verdicts
        agree = own[0] == general[0] == "ok"
    if not agree:
        raise AssertionError(f"{payload[:200]!r}: Decoder gives {own}, decode {general}")
    return general[:1] if general[0] == "ok" else general


class ConformanceTest(unittest.TestCase):
    def test_envelopes(self):
        vectors = load_vectors()
        self.assertGreaterEqual(len(vectors["envelopes"]), 40)
        for case in vectors["envelopes"]:
            with self.subTest(case["name"]):
                if "payload_hex" in case:
                    payload = bytes.fromhex(case["payload_hex"])
                else:
                    payload = case["payload"].encode("utf-8")
                want = ("ok",) if case["verdict"] == "ok" else (
                    "error", case["reason"], case["pointer"])
                self.assertEqual(verdict(payload, vectors["expect"]), want)

    def test_frames(self):
        errors = {"size": wire.FrameSizeError, "truncated": wire.TruncatedFrameError,
                  "eof": wire.EndOfStream}
        for case in load_vectors()["frames"]:
            with self.subTest(case["name"]):
                stream = io.BytesIO(bytes.fromhex(case["hex"]))
                if case["verdict"] == "ok":
                    self.assertEqual(wire.read_frame(stream), bytes.fromhex(case["payload_hex"]))
                else:
                    with self.assertRaises(errors[case["verdict"]]):
                        wire.read_frame(stream)


EXPECT = {"session_id": "root", "generation": "g-1"}
ENVELOPE = '{"version":1,"session_id":"root","generation":"g-1","message":%s}'


def reply_of(value):
    """The payload of an ok reply carrying value, both str or both bytes."""
    if isinstance(value, str):
        return reply_of(value.encode()).decode()
    return ENVELOPE.encode() % (b'{"kind":"host_reply","id":"r-1","execution_id":"c-1",'
                       b'"reply":{"kind":"ok","value":%s}}' % value)


class JudgingOrderTest(unittest.TestCase):
    """Cases beyond the vectors, each checked against the Go decoder when written."""

    CASES = [
        ("duplicate before NaN", '{"a":1,"a":2,"b":NaN}', ("error", "duplicate", "")),
        ("NaN before duplicate", '{"b":NaN,"a":1,"a":2}', ("error", "syntax", "")),
        ("duplicate before invalid UTF-8", b'{"a":1,"a":2,"b":"\xff"}', ("error", "duplicate", "")),
        ("invalid UTF-8 before duplicate", b'{"b":"\xff","a":1,"a":2}', ("error", "syntax", "")),
        ("duplicate before trailing data", '{"a":1,"a":2} x', ("error", "duplicate", "")),
        ("duplicate spelled with an escape", '{"a":1,"\\u0061":2}', ("error", "duplicate", "")),
        ("nesting of 10000", reply_of("[" * 9997 + "]" * 9997), ("ok",)),
        ("nesting of 10001", reply_of("[" * 9998 + "]" * 9998), ("error", "syntax", "")),
        ("nesting past Python's recursion limit", reply_of("[" * 3000 + "]" * 3000), ("ok",)),
        ("version of 5000 digits", ENVELOPE.replace('"version":1', '"version":' + "1" * 5000)
         % '{"kind":"shutdown"}', ("error", "mismatch", "/version")),
        ("truncated_bytes of 5000 digits", ENVELOPE % (
            '{"kind":"completed","id":"c-1","result":{"kind":"cell","status":"ok","output":[],'
            '"truncated_bytes":%s,"error":null}}' % ("9" * 5000)),
         ("error", "value", "/message/result/truncated_bytes")),
        ("lone low surrogate", ENVELOPE % '{"kind":"execute","id":"c-1","code":"\\udc00"}',
         ("error", "syntax", "")),
        ("high surrogate, then no low one", ENVELOPE % (
            '{"kind":"execute","id":"c-1","code":"\\ud800\\u0041"}'), ("error", "syntax", "")),
        ("escaped backslash before ud800", ENVELOPE % (
            '{"kind":"execute","id":"c-1","code":"\\\\ud800"}'), ("ok",)),
    ]

    def test_cases(self):
        for name, payload, want in self.CASES:
            with self.subTest(name):
                if isinstance(payload, str):
                    payload = payload.encode("utf-8")
                self.assertEqual(verdict(payload, EXPECT), want)

    def test_values(self):
        _, message = wire.decode(
            (ENVELOPE % '{"kind":"execute","id":"c-1","code":"a\\ud83d\\ude00\\u00e9"}').encode(),
            "root", "g-1")
        self.assertEqual(message, {"kind": "execute", "id": "c-1", "code": "a\U0001F600é"})
        _, message = wire.decode(reply_of("[" * 3000 + "1" + "]" * 3000).encode(), "root", "g-1")
        value = message["reply"]["value"]
        for _ in range(3000):
            value = value[0]
        self.assertEqual(value, 1)

    def test_slow_path_reads_the_vectors_as_json_does(self):
        vectors = load_vectors()
        for case in vectors["envelopes"]:
            if case["verdict"] == "ok":
                with self.subTest(case["name"]):
                    payload = case["payload"].encode("utf-8")
                    self.assertEqual(wire._parse_exactly(payload), json.loads(payload))


class PlainPathTest(unittest.TestCase):
    """The worker's Decoder reads an ok reply in the host's shape without the full
    judgement, and judges anything else in full."""

    def test_the_hosts_shape_takes_the_plain_path(self):
        decoder = wire.Decoder("root", "g-1")
        for value in (b"1", b"null", b"[1, 2]", b'{"now":"2026-11-30T14:00:00Z","pending_inputs":["event:1"]}',
                      '"é"'.encode()):
            with self.subTest(value):
                payload = reply_of(value)
                plain = decoder.plain(payload)
                self.assertIsNotNone(plain)
                self.assertEqual(("host_reply", plain), wire.decode(payload, "root", "g-1"))

    def test_anything_else_is_judged_in_full(self):
        decoder = wire.Decoder("root", "g-1")
        for value in (b'{"a":1,"a":2}', b"NaN", b'"\\ud800"', b'"\\uDC00"', b"1}}}",
                      b'"\\ud83d\\ude00 \\\\ud800"',  # surrogate escapes, even good ones
                      b'{"a":1}},"x":{"b":{}}', b"[1,]", b'"\xff"',
                      b" [1] "):  # the host writes no space around a value
            with self.subTest(value[:20]):
                payload = reply_of(value)
                self.assertIsNone(decoder.plain(payload))
                verdict(payload, EXPECT)  # as decode judges it
        other = ENVELOPE.encode().replace(b'"root"', b'"other"') % (
            b'{"kind":"host_reply","id":"r-1","execution_id":"c-1","reply":{"kind":"ok","value":1}}')
        self.assertIsNone(decoder.plain(other))
        self.assertEqual(verdict(other, EXPECT), ("error", "mismatch", "/session_id"))


class PlainDepthTest(unittest.TestCase):
    """The plain path's nesting bound is the Go decoder's on every interpreter, whatever
    bounds the interpreter's own json parser (about 1000 before 3.13, about 10000 since,
    less the frames already on the stack)."""

    def test_the_bound_and_one_past(self):
        # A fresh interpreter, the check at the top of its stack, where the json parser
        # nests deepest.
        script = textwrap.dedent("""
            import sys
            sys.path.insert(0, sys.argv[1])
            from kiln import wire
            bound = wire._REPLY_VALUE_DEPTH
            decoder = wire.Decoder("root", "g-1")
            envelope = ('{"version":1,"session_id":"root","generation":"g-1","message":{"kind":"host_reply",'
                        '"id":"r-1","execution_id":"c-1","reply":{"kind":"ok","value":%s}}}')
            for depth in (bound, bound + 1):
                payload = (envelope % ("[" * depth + "]" * depth)).encode()
                try:
                    wire.decode(payload, "root", "g-1")
                    general = "ok"
                except wire.DecodeError:
                    general = "error"
                plain = decoder.plain(payload)
                print(depth - bound, general, "none" if plain is None else wire._nesting(plain["reply"]["value"]) - bound)
        """)
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run([sys.executable, "-I", "-c", script, here], capture_output=True, text=True, check=True).stdout.split("\n")
        self.assertIn(out[0], ("0 ok none", "0 ok 0"))  # at the bound: plain, or judged in full
        self.assertEqual(out[1], "1 error none")  # one past: refused, never plainly taken

    def test_many_shallow_containers_stay_plain(self):
        value = b"[" + b",".join([b'{"a":[1]}'] * (wire._REPLY_VALUE_DEPTH + 1)) + b"]"
        plain = wire.Decoder("root", "g-1").plain(reply_of(value))
        self.assertIsNotNone(plain)
        self.assertEqual(len(plain["reply"]["value"]), wire._REPLY_VALUE_DEPTH + 1)


class EncodeTest(unittest.TestCase):
    def test_round_trip(self):
        fields = {"id": "c-1", "result": {
            "kind": wire.RESULT_CELL, "status": wire.STATUS_OK,
            "output": [{"stream": wire.STREAM_RESULT, "text": "é\x00\n"}],
            "truncated_bytes": 3, "error": None}}
        payload = wire.encode("root", "g-1", wire.COMPLETED, fields)
        self.assertIn("é".encode("utf-8"), payload)  # UTF-8, not \u escapes
        self.assertNotIn(b" ", payload)
        self.assertEqual(wire.decode(payload, "root", "g-1"),
                         (wire.COMPLETED, {"kind": wire.COMPLETED, **fields}))

    def test_refuses_what_json_cannot_carry(self):
        for bad in (float("nan"), float("inf"), "\ud800", object()):
            with self.subTest(repr(bad)), self.assertRaises((ValueError, TypeError)):
                wire.encode("root", "g-1", wire.HOST_REQUEST,
                            {"id": "r-1", "execution_id": "c-1", "request": {"x": bad}})

    def test_host_request_is_what_encode_makes(self):
        for request in ({"method": "runtime.inspect"}, {"method": "x", "a": [1, 2.5, None, True]},
                        {"method": "é\u2028😀", "text": 'quote " backslash \\ \x00', "n": {}}):
            for execution_id in ("c-1", "c-" + "9" * 126):
                with self.subTest(request=request, execution_id=execution_id):
                    general = wire.encode("root", "g-1", wire.HOST_REQUEST, {
                        "id": "r-7", "execution_id": execution_id, "request": request})
                    fast = wire.encode_host_request("root", "g-1", "r-7", execution_id, request)
                    self.assertEqual(fast, general)
        for bad in (float("nan"), "\ud800", object()):
            with self.subTest(repr(bad)), self.assertRaises((ValueError, TypeError)):
                wire.encode_host_request("root", "g-1", "r-1", "c-1", {"method": "x", "p": bad})

    def test_valid_identifier(self):
        self.assertTrue(wire.valid_identifier("azAZ09_.-"))
        self.assertTrue(wire.valid_identifier("a" * 128))
        for bad in ("", "a" * 129, "a b", "é", "a\n"):
            self.assertFalse(wire.valid_identifier(bad), bad)


class TrickleStream:
    """A binary stream that hands out at most one byte per read and counts what it gave."""

    def __init__(self, data):
        self._data = data
        self.given = 0

    def read(self, size):
        chunk = self._data[self.given:self.given + min(size, 1)]
        self.given += len(chunk)
        return chunk


class FrameTest(unittest.TestCase):
    def test_length_is_judged_before_the_payload_is_read(self):
        stream = TrickleStream(b"\x00\x10\x00\x01" + b"x" * 100)
        with self.assertRaises(wire.FrameSizeError):
            wire.read_frame(stream)
        self.assertEqual(stream.given, 4)

    def test_short_reads_make_whole_frames(self):
        stream = TrickleStream(wire.pack_frame(b"hello") + wire.pack_frame(b"{}"))
        self.assertEqual(wire.read_frame(stream), b"hello")
        self.assertEqual(wire.read_frame(stream), b"{}")
        with self.assertRaises(wire.EndOfStream):
            wire.read_frame(stream)

    def test_largest_frame(self):
        payload = b"x" * wire.MAX_FRAME_SIZE
        frame = wire.pack_frame(payload)
        self.assertEqual(frame[:4], b"\x00\x10\x00\x00")
        self.assertEqual(wire.read_frame(io.BytesIO(frame)), payload)

    def test_pack_refuses_sizes_out_of_range(self):
        for payload in (b"", b"x" * (wire.MAX_FRAME_SIZE + 1)):
            with self.assertRaises(wire.FrameSizeError):
                wire.pack_frame(payload)

    def test_truncation_inside_prefix_and_payload(self):
        for data in (b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x03ab"):
            with self.subTest(data), self.assertRaises(wire.TruncatedFrameError):
                wire.read_frame(io.BytesIO(data))

    def test_splitter_cuts_frames_from_any_pieces(self):
        data = wire.pack_frame(b"hello") + wire.pack_frame(b"{}") + wire.pack_frame(b"x" * 70000)
        for piece in (1, 3, 4, 5, 7, 65536, len(data)):
            with self.subTest(piece=piece):
                splitter, frames = wire.FrameSplitter(), []
                for start in range(0, len(data), piece):
                    splitter.feed(data[start:start + piece])
                    while (payload := splitter.next()) is not None:
                        frames.append(payload)
                self.assertEqual(frames, [b"hello", b"{}", b"x" * 70000])
                self.assertFalse(splitter.partial())

    def test_splitter_judges_a_length_before_its_payload(self):
        for prefix in (b"\x00\x00\x00\x00", (wire.MAX_FRAME_SIZE + 1).to_bytes(4, "big")):
            splitter = wire.FrameSplitter()
            splitter.feed(prefix)
            with self.subTest(prefix), self.assertRaises(wire.FrameSizeError):
                splitter.next()
        splitter = wire.FrameSplitter()
        splitter.feed(b"\x00\x00\x00\x05ab")
        self.assertIsNone(splitter.next())
        self.assertTrue(splitter.partial())

    def test_write_frame_on_a_socket(self):
        left, right = socket.socketpair()
        with left, right:
            wire.write_frame(left, b'{"a":1}')
            self.assertEqual(wire.read_frame(right.makefile("rb")), b'{"a":1}')


if __name__ == "__main__":
    unittest.main()
