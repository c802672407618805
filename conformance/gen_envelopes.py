"""Writes envelopes.json, the protocol v1 vectors that the Go and Python decoders both run.

Run from the repository root: python3 conformance/gen_envelopes.py
The verdicts are the rules of docs/protocol.md, written out by hand; nothing here decodes.
"""
import json
import os

SESSION, GENERATION = "root", "g-1"


def env(message, **over):
    e = {"version": 1, "session_id": SESSION, "generation": GENERATION, "message": message}
    e.update(over)
    return json.dumps(e, ensure_ascii=False, separators=(",", ":"))


def cell(status="ok", output=None, truncated=0, error=None, **extra):
    r = {"kind": "cell", "status": status, "output": output if output is not None else [],
         "truncated_bytes": truncated, "error": error}
    r.update(extra)
    return {"kind": "completed", "id": "c-1", "result": r}


cases = []


def ok(name, payload):
    cases.append({"name": name, "payload": payload, "verdict": "ok"})


def bad(name, payload, reason, pointer):
    cases.append({"name": name, "payload": payload, "verdict": "error", "reason": reason, "pointer": pointer})


def bad_hex(name, raw, reason, pointer):
    cases.append({"name": name, "payload_hex": raw.hex(), "verdict": "error", "reason": reason, "pointer": pointer})


# Every kind of the vocabulary, well formed.
ok("shutdown", env({"kind": "shutdown"}))
ok("execute", env({"kind": "execute", "id": "c-1", "code": "x = 1"}))
ok("execute empty code", env({"kind": "execute", "id": "c-1", "code": ""}))
ok("hello workbench", env({"kind": "hello", "token": "a" * 64, "role": "workbench", "revision": None, "slots": []}))
ok("hello hooks", env({"kind": "hello", "token": "t", "role": "hooks", "revision": "f" * 64,
                       "slots": ["attention.plan", "delivery.review"]}))
ok("interrupt", env({"kind": "interrupt", "id": "c-1"}))
ok("invoke", env({"kind": "invoke", "id": "h-1", "slot": "delivery.review", "input": {"text": "hi"}}))
ok("host_request", env({"kind": "host_request", "id": "r-1", "execution_id": "c-1",
                        "request": {"method": "runtime.inspect"}}))
ok("host_reply ok", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1",
                         "reply": {"kind": "ok", "value": {"a": [1, 2.5, None, True, "é"]}}}))
ok("host_reply ok null value", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1",
                                    "reply": {"kind": "ok", "value": None}}))
ok("host_reply error", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1",
                            "reply": {"kind": "error", "code": "unknown_method", "message": "no such method"}}))
ok("completed cell", env(cell(output=[{"stream": "stdout", "text": "hi\n"}, {"stream": "result", "text": "42"}])))
ok("completed cell error", env(cell(status="error", error="Traceback ...")))
ok("completed cell yielded", env(cell(status="yielded")))
ok("completed cell interrupted", env(cell(status="interrupted", error="KeyboardInterrupt")))
ok("completed hook", env({"kind": "completed", "id": "h-1", "result": {"kind": "hook", "value": {"action": "allow"}}}))
ok("completed failed", env({"kind": "completed", "id": "h-1", "result": {"kind": "failed", "error": "boom"}}))
ok("whitespace around the value", " \n" + env({"kind": "shutdown"}) + "\t ")
ok("member order is free", json.dumps({"message": {"kind": "shutdown"}, "generation": GENERATION,
                                       "session_id": SESSION, "version": 1}))

# Identifiers at and past their limits.
ok("id of 128 characters", env({"kind": "interrupt", "id": "a" * 128}))
ok("id of every allowed character", env({"kind": "interrupt", "id": "azAZ09_.-"}))
bad("id of 129 characters", env({"kind": "interrupt", "id": "a" * 129}), "value", "/message/id")
bad("empty id", env({"kind": "interrupt", "id": ""}), "value", "/message/id")
bad("id with a space", env({"kind": "interrupt", "id": "a b"}), "value", "/message/id")
bad("id with a slash", env({"kind": "interrupt", "id": "a/b"}), "value", "/message/id")
bad("id with a non-ASCII letter", env({"kind": "interrupt", "id": "é"}), "value", "/message/id")
bad("session id breaking the rule", env({"kind": "shutdown"}, session_id="r oot"), "value", "/session_id")
bad("slot list item breaking the rule", env({"kind": "hello", "token": "t", "role": "hooks", "revision": None,
                                             "slots": ["ok", "not ok"]}), "value", "/message/slots/1")

# Limits of a cell: source, output records, output text, error text.
ok("code of 262144 bytes", env({"kind": "execute", "id": "c-1", "code": "x" * 262144}))
ok("code of 262144 bytes in two-byte characters", env({"kind": "execute", "id": "c-1", "code": "é" * 131072}))
bad("code of 262145 bytes", env({"kind": "execute", "id": "c-1", "code": "x" * 262145}), "value", "/message/code")
bad("code of 262145 bytes, one past in two-byte characters",
    env({"kind": "execute", "id": "c-1", "code": "é" * 131072 + "x"}), "value", "/message/code")
ok("256 output records", env(cell(output=[{"stream": "stdout", "text": "x"}] * 256)))
bad("257 output records", env(cell(output=[{"stream": "stdout", "text": ""}] * 257)), "value",
    "/message/result/output/256")
ok("output text of 65536 bytes", env(cell(output=[{"stream": "stdout", "text": "x" * 65535},
                                                  {"stream": "result", "text": "y"}])))
bad("output text of 65537 bytes", env(cell(output=[{"stream": "stdout", "text": "x" * 65535},
                                                   {"stream": "result", "text": "yy"}])),
    "value", "/message/result/output/1/text")
ok("error text of 65536 bytes", env(cell(status="error", error="e" * 65536)))
bad("error text of 65537 bytes", env(cell(status="error", error="e" * 65537)), "value", "/message/result/error")
bad("failed text of 65537 bytes", env({"kind": "completed", "id": "h-1",
                                       "result": {"kind": "failed", "error": "e" * 65537}}),
    "value", "/message/result/error")
ok("truncated_bytes large", env(cell(truncated=9007199254740993)))
ok("truncated_bytes at int64 max", env(cell(truncated=2**63 - 1)))
bad("truncated_bytes past int64 max", env(cell(truncated=2**63)), "value", "/message/result/truncated_bytes")
bad("truncated_bytes negative", env(cell(truncated=-1)), "value", "/message/result/truncated_bytes")
bad("truncated_bytes fractional", env(cell(truncated=1.5)), "type", "/message/result/truncated_bytes")
bad("truncated_bytes boolean", env(cell(truncated=True)), "type", "/message/result/truncated_bytes")

# kiln's extensions of v1: streamed output, and a cell's exception in parts.
def chunk(stream="stdout", text="hi\n", **extra):
    m = {"kind": "output", "execution_id": "c-1", "stream": stream, "text": text}
    m.update(extra)
    return m


def exc(type_="ValueError", value="bad", traceback="Traceback ...", **extra):
    e = {"type": type_, "value": value, "traceback": traceback}
    e.update(extra)
    return e


ok("output chunk", env(chunk()))
ok("output chunk on stderr", env(chunk(stream="stderr")))
ok("output chunk of 65536 bytes", env(chunk(text="x" * 65536)))
bad("output chunk of 65537 bytes", env(chunk(text="x" * 65537)), "value", "/message/text")
bad("output chunk of the result stream", env(chunk(stream="result")), "value", "/message/stream")
bad("output chunk without execution_id", env({"kind": "output", "stream": "stdout", "text": ""}), "missing",
    "/message/execution_id")
bad("output chunk with an unknown member", env(chunk(at=1)), "unknown", "/message/at")
bad("output chunk text null", env(chunk(text=None)), "type", "/message/text")
ok("completed cell with an exception", env(cell(status="error", error="Traceback ...", exception=exc())))
ok("exception type of 1024 bytes", env(cell(status="error", error="e", exception=exc(type_="T" * 1024))))
bad("exception type of 1025 bytes", env(cell(status="error", error="e", exception=exc(type_="T" * 1025))),
    "value", "/message/result/exception/type")
ok("exception value of 65536 bytes", env(cell(status="error", error="e", exception=exc(value="v" * 65536))))
bad("exception traceback of 65537 bytes", env(cell(status="error", error="e", exception=exc(traceback="t" * 65537))),
    "value", "/message/result/exception/traceback")
bad("exception null", env(cell(status="error", error="e", exception=None)), "type", "/message/result/exception")
bad("exception without a value", env(cell(status="error", error="e", exception={"type": "E", "traceback": ""})),
    "missing", "/message/result/exception/value")
bad("exception with an unknown member", env(cell(status="error", error="e", exception=exc(ename="E"))),
    "unknown", "/message/result/exception/ename")
bad("exception on a failed result", env({"kind": "completed", "id": "h-1",
                                         "result": {"kind": "failed", "error": "boom", "exception": exc()}}),
    "unknown", "/message/result/exception")

# kiln's extension of v1: a display's place among a completion's output records.
PLACE = {"stream": "display"}
ok("display places among the text", env(cell(output=[{"stream": "stdout", "text": "a"}, PLACE, PLACE,
                                                     {"stream": "stdout", "text": "b"},
                                                     {"stream": "result", "text": "42"}])))
ok("256 text records and 32 display places",
   env(cell(output=[PLACE] * 32 + [{"stream": "stdout", "text": "x"}] * 256)))
bad("289 output records", env(cell(output=[PLACE] * 33 + [{"stream": "stdout", "text": "x"}] * 256)), "value",
    "/message/result/output")
bad("33 display places", env(cell(output=[PLACE] * 33)), "value", "/message/result/output/32")
bad("display place with text", env(cell(output=[{"stream": "display", "text": ""}])), "unknown",
    "/message/result/output/0/text")
bad("display place with data", env(cell(output=[{"stream": "display", "data": {"text/plain": "p"}}])), "unknown",
    "/message/result/output/0/data")
bad("display places count no text", env(cell(output=[PLACE, {"stream": "stdout", "text": "x" * 65537}])),
    "value", "/message/result/output/1/text")

# kiln's extension of v1: a running cell's rich display, a MIME bundle.
def shown(data=None, dropped=0, **extra):
    m = {"kind": "display", "execution_id": "c-1",
         "data": data if data is not None else {"text/plain": "<Figure>", "image/png": "iVBORw0KGgo="},
         "dropped": dropped}
    m.update(extra)
    return m


ok("display", env(shown()))
ok("display of every known MIME type", env(shown({
    "text/plain": "p", "text/html": "<b>h</b>", "text/markdown": "*m*", "text/latex": "$x$",
    "application/json": "{}", "image/svg+xml": "<svg/>", "image/png": "", "image/jpeg": "/9j/"})))
ok("display with its items dropped", env(shown({"text/plain": "p\n[display: image/png dropped]"}, dropped=1)))
bad("display without text/plain", env(shown({"text/html": "h"})), "missing", "/message/data")
bad("display of an unknown MIME type", env(shown({"text/plain": "p", "application/x-y": "z"})), "unknown",
    "/message/data/application~1x-y")
bad("display unknown type named in sorted order", env(shown({"text/plain": "p", "z/z": "", "a/a": ""})),
    "unknown", "/message/data/a~1a")
bad("display png not base64", env(shown({"text/plain": "p", "image/png": "iVBOR w=="})), "value",
    "/message/data/image~1png")
bad("display png unpadded", env(shown({"text/plain": "p", "image/png": "iVBORw"})), "value",
    "/message/data/image~1png")
bad("display html not a string", env(shown({"text/plain": "p", "text/html": {"a": 1}})), "type",
    "/message/data/text~1html")
bad("display data not an object", env(shown([])), "type", "/message/data")
bad("display dropped negative", env(shown(dropped=-1)), "value", "/message/dropped")
bad("display without dropped", env({"kind": "display", "execution_id": "c-1", "data": {"text/plain": "p"}}),
    "missing", "/message/dropped")


ok("complete", env({"kind": "complete", "id": "k-1", "text": "pri"}))
ok("complete text of 4096 bytes", env({"kind": "complete", "id": "k-1", "text": "x" * 4096}))
bad("complete text of 4097 bytes", env({"kind": "complete", "id": "k-1", "text": "x" * 4097}), "value", "/message/text")
ok("completion", env({"kind": "completed", "id": "k-1", "result": {"kind": "completion", "matches": ["print(", "property("]}}))
ok("completion of 1000 matches", env({"kind": "completed", "id": "k-1",
                                      "result": {"kind": "completion", "matches": ["m"] * 1000}}))
bad("completion of 1001 matches", env({"kind": "completed", "id": "k-1",
                                       "result": {"kind": "completion", "matches": ["m"] * 1001}}),
    "value", "/message/result/matches")
bad("completion match of 1025 bytes", env({"kind": "completed", "id": "k-1",
                                           "result": {"kind": "completion", "matches": ["ok", "m" * 1025]}}),
    "value", "/message/result/matches/1")
bad("completion match not a string", env({"kind": "completed", "id": "k-1",
                                          "result": {"kind": "completion", "matches": [1]}}),
    "type", "/message/result/matches/0")

# Syntax: one strict JSON value in valid UTF-8.
bad("not JSON", "hello", "syntax", "")
bad("trailing garbage", env({"kind": "shutdown"}) + "x", "syntax", "")
bad("two values", env({"kind": "shutdown"}) + " {}", "syntax", "")
bad("NaN", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1",
                "reply": {"kind": "ok", "value": 0}}).replace('"value":0', '"value":NaN'), "syntax", "")
bad("Infinity", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1",
                     "reply": {"kind": "ok", "value": 0}}).replace('"value":0', '"value":-Infinity'), "syntax", "")
bad("single quotes", env({"kind": "shutdown"}).replace('"shutdown"', "'shutdown'"), "syntax", "")
bad("trailing comma", env({"kind": "shutdown"})[:-1] + ",}", "syntax", "")
bad("leading zero", env({"kind": "shutdown"}).replace('"version":1', '"version":01'), "syntax", "")
bad_hex("invalid UTF-8 byte", env({"kind": "execute", "id": "c-1", "code": "ab"}).encode().replace(b"ab", b"a\xffb"),
        "syntax", "")
bad_hex("overlong UTF-8", env({"kind": "execute", "id": "c-1", "code": "ab"}).encode().replace(b"ab", b"a\xc0\xafb"),
        "syntax", "")
bad("lone surrogate escape", env({"kind": "execute", "id": "c-1", "code": "ab"}).replace("ab", "a\\ud800b"),
    "syntax", "")
ok("escaped surrogate pair", env({"kind": "execute", "id": "c-1", "code": "ab"}).replace("ab", "a\\ud83d\\ude00b"))
bad("empty payload", "", "syntax", "")

# Duplicate names, at every depth.
bad("duplicate envelope member", env({"kind": "shutdown"})[:-1] + ',"version":1}', "duplicate", "")
bad("duplicate message member", env({"kind": "interrupt", "id": "a"}).replace('"id":"a"', '"id":"a","id":"b"'),
    "duplicate", "")
bad("duplicate name deep in a request", env({"kind": "host_request", "id": "r-1", "execution_id": "c-1",
                                             "request": {"method": "m", "p": {"a": 1}}}).replace('"a":1', '"a":1,"a":2'),
    "duplicate", "")
bad("duplicate name deep in a reply value", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1",
                                                 "reply": {"kind": "ok", "value": [{"k": 1}]}}).replace('"k":1', '"k":1,"k":1'),
    "duplicate", "")

# Types.
bad("payload is an array", "[]", "type", "")
bad("payload is a string", '"x"', "type", "")
bad("message is an array", env([]), "type", "/message")
bad("message is null", env(None), "type", "/message")
bad("version as a string", env({"kind": "shutdown"}, version="1"), "type", "/version")
bad("version 1.0", env({"kind": "shutdown"}).replace('"version":1', '"version":1.0'), "type", "/version")
bad("version 1e0", env({"kind": "shutdown"}).replace('"version":1', '"version":1e0'), "type", "/version")
bad("version true", env({"kind": "shutdown"}, version=True), "type", "/version")
bad("id as a number", env({"kind": "interrupt", "id": 7}), "type", "/message/id")
bad("code null", env({"kind": "execute", "id": "c-1", "code": None}), "type", "/message/code")
bad("revision as a number", env({"kind": "hello", "token": "t", "role": "workbench", "revision": 3, "slots": []}),
    "type", "/message/revision")
bad("slots as a string", env({"kind": "hello", "token": "t", "role": "workbench", "revision": None, "slots": "x"}),
    "type", "/message/slots")
bad("kind as a number", env({"kind": 3}), "type", "/message/kind")
bad("request as an array", env({"kind": "host_request", "id": "r-1", "execution_id": "c-1", "request": []}),
    "type", "/message/request")
bad("invoke input as a string", env({"kind": "invoke", "id": "h-1", "slot": "s", "input": "x"}),
    "type", "/message/input")
bad("cell error as a number", env(cell(error=5)), "type", "/message/result/error")
bad("output as an object", env(cell(output={})), "type", "/message/result/output")
bad("output record as a string", env(cell(output=["x"])), "type", "/message/result/output/0")
bad("output text null", env(cell(output=[{"stream": "stdout", "text": None}])), "type",
    "/message/result/output/0/text")

# Missing members.
for name in ["version", "session_id", "generation", "message"]:
    e = json.loads(env({"kind": "shutdown"}))
    del e[name]
    bad("missing " + name, json.dumps(e), "missing", "/" + name)
bad("missing kind", env({"id": "c-1"}), "missing", "/message/kind")
bad("missing code", env({"kind": "execute", "id": "c-1"}), "missing", "/message/code")
bad("missing id and code: the first in table order", env({"kind": "execute"}), "missing", "/message/id")
bad("missing revision", env({"kind": "hello", "token": "t", "role": "workbench", "slots": []}), "missing",
    "/message/revision")
bad("missing reply kind", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1", "reply": {"value": 1}}),
    "missing", "/message/reply/kind")
bad("missing reply value", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1", "reply": {"kind": "ok"}}),
    "missing", "/message/reply/value")
bad("missing cell status", env({"kind": "completed", "id": "c-1", "result": {"kind": "cell", "output": [],
                                                                              "truncated_bytes": 0, "error": None}}),
    "missing", "/message/result/status")
bad("missing output text", env(cell(output=[{"stream": "stdout"}])), "missing", "/message/result/output/0/text")

# Unknown members: refused, the first in sorted order, before anything missing.
bad("unknown envelope member", env({"kind": "shutdown"}, extra=1), "unknown", "/extra")
bad("unknown message member", env({"kind": "shutdown", "id": "c-1"}), "unknown", "/message/id")
bad("unknown members: first in sorted order", env({"kind": "interrupt", "id": "c", "zz": 1, "aa": 1}), "unknown",
    "/message/aa")
bad("unknown before missing", env({"kind": "execute", "id": "c-1", "extra": 1}), "unknown", "/message/extra")
bad("unknown result member", env(cell(stdout="x")), "unknown", "/message/result/stdout")
bad("unknown output record member", env(cell(output=[{"stream": "stdout", "text": "", "at": 0}])), "unknown",
    "/message/result/output/0/at")
bad("ok reply with a code", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1",
                                 "reply": {"kind": "ok", "value": 1, "code": "x"}}), "unknown", "/message/reply/code")
bad("unknown member name escaped in the pointer", env({"kind": "shutdown", "a/b~c": 1}), "unknown",
    "/message/a~1b~0c")
bad("member names differ by case", env({"kind": "interrupt", "ID": "c-1", "id": "c-1"}), "unknown", "/message/ID")

# Values outside their sets.
bad("unknown message kind", env({"kind": "bogus"}), "value", "/message/kind")
bad("unknown reply kind", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1", "reply": {"kind": "maybe"}}),
    "value", "/message/reply/kind")
bad("unknown result kind", env({"kind": "completed", "id": "c-1", "result": {"kind": "partial"}}), "value",
    "/message/result/kind")
bad("unknown role", env({"kind": "hello", "token": "t", "role": "admin", "revision": None, "slots": []}), "value",
    "/message/role")
bad("unknown status", env(cell(status="done")), "value", "/message/result/status")
bad("unknown stream", env(cell(output=[{"stream": "stdin", "text": ""}])), "value", "/message/result/output/0/stream")
bad("error code breaking the identifier rule", env({"kind": "host_reply", "id": "r-1", "execution_id": "c-1",
                                                     "reply": {"kind": "error", "code": "no good", "message": ""}}),
    "value", "/message/reply/code")

# Version and identity.
bad("version 2", env({"kind": "shutdown"}, version=2), "mismatch", "/version")
bad("version 0", env({"kind": "shutdown"}, version=0), "mismatch", "/version")
bad("version -0", env({"kind": "shutdown"}).replace('"version":1', '"version":-0'), "mismatch", "/version")
bad("other session", env({"kind": "shutdown"}, session_id="other"), "mismatch", "/session_id")
bad("old generation", env({"kind": "shutdown"}, generation="g-0"), "mismatch", "/generation")
bad("session checked before generation", env({"kind": "shutdown"}, session_id="x", generation="y"), "mismatch",
    "/session_id")
bad("version checked before identity", env({"kind": "shutdown"}, version=2, session_id="x"), "mismatch", "/version")
bad("envelope judged before message", env({"kind": "bogus"}, generation="g-9"), "mismatch", "/generation")

frames = [
    {"name": "one small frame", "hex": (b"\x00\x00\x00\x02{}").hex(), "verdict": "ok", "payload_hex": b"{}".hex()},
    {"name": "length 1", "hex": (b"\x00\x00\x00\x011").hex(), "verdict": "ok", "payload_hex": b"1".hex()},
    {"name": "length 0", "hex": "00000000", "verdict": "size"},
    {"name": "length 1048577", "hex": "00100001", "verdict": "size"},
    {"name": "length 4294967295", "hex": "ffffffff", "verdict": "size"},
    {"name": "length 1048576, stream ends early", "hex": "00100000" + "7b7d", "verdict": "truncated"},
    {"name": "payload shorter than its length", "hex": "00000005" + b"{}".hex(), "verdict": "truncated"},
    {"name": "stream ends inside the length", "hex": "0000", "verdict": "truncated"},
    {"name": "empty stream", "hex": "", "verdict": "eof"},
]

out = {
    "comment": "Protocol v1 vectors; generated by conformance/gen_envelopes.py from the rules of docs/protocol.md.",
    "expect": {"session_id": SESSION, "generation": GENERATION},
    "envelopes": cases,
    "frames": frames,
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "envelopes.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"{len(cases)} envelope cases, {len(frames)} frame cases -> {path}")
