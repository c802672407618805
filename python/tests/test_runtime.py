"""The runtime object's methods: each host method a coroutine over request()."""
import asyncio
import unittest

from kiln import wire
from kiln.runtime import EXECUTION_ID, HostError, Runtime, Yielded


class FakeHost:
    """Records what the runtime posts and answers each request with a scripted reply."""

    def __init__(self, loop, replies):
        self.loop = loop
        self.replies = list(replies)
        self.sent = []
        self.yields = []
        self.runtime = Runtime(self.send_request, self.yields.append)
        self.runtime.loop = loop

    def send_request(self, request_id, execution_id, request):
        self.sent.append((wire.HOST_REQUEST, {"id": request_id, "execution_id": execution_id,
                                              "request": request}))
        reply = self.replies.pop(0)
        self.loop.call_soon(self.runtime.deliver, request_id, execution_id, reply)


def run(replies, make_call):
    """Run make_call(runtime) as cell c-1; return (outcome or exception, host)."""
    loop = asyncio.new_event_loop()
    host = FakeHost(loop, replies)

    async def cell():
        EXECUTION_ID.set("c-1")
        try:
            return await make_call(host.runtime)
        except BaseException as exc:  # Yielded is a BaseException
            return exc

    try:
        return loop.run_until_complete(cell()), host
    finally:
        loop.close()


OK = {"kind": wire.REPLY_OK, "value": {"done": True}}


class MethodTest(unittest.TestCase):
    def test_each_method_sends_its_request(self):
        cases = [
            (lambda r: r.inspect(), {"method": "runtime.inspect"}),
            (lambda r: r.workspace.info(), {"method": "workspace.info"}),
            (lambda r: r.workspace.run(("ls", "-l")), {"method": "workspace.run", "argv": ["ls", "-l"]}),
            (lambda r: r.workspace.run(["make"], cwd="src", env={"A": "1"}, timeout_ms=5,
                                       max_output_bytes=10),
             {"method": "workspace.run", "argv": ["make"], "cwd": "src", "env": {"A": "1"},
              "timeout_ms": 5, "max_output_bytes": 10}),
            (lambda r: r.evidence.resolve(("event:1",)), {"method": "evidence.resolve", "refs": ["event:1"]}),
            (lambda r: r.wait(5, "why"), {"method": "runtime.wait", "seconds": 5, "reason": "why"}),
            (lambda r: r.request("x.y", a=1), {"method": "x.y", "a": 1}),
        ]
        for make_call, want in cases:
            with self.subTest(want["method"]):
                outcome, host = run([OK], make_call)
                self.assertEqual(outcome, {"done": True})
                kind, fields = host.sent[0]
                self.assertEqual((kind, fields["execution_id"], fields["request"]),
                                 (wire.HOST_REQUEST, "c-1", want))

    def test_errors_raise_one_type(self):
        outcome, _ = run([{"kind": wire.REPLY_ERROR, "code": "unknown_method", "message": "no"}],
                         lambda r: r.inspect())
        self.assertIsInstance(outcome, HostError)
        self.assertEqual((outcome.code, outcome.message), ("unknown_method", "no"))

    def test_an_accepted_wait_raises_yielded(self):
        value = {"status": "yielded", "wait": "wait:1", "reason": "r"}
        outcome, host = run([{"kind": wire.REPLY_OK, "value": value}], lambda r: r.wait(None, "r"))
        self.assertIsInstance(outcome, Yielded)
        self.assertNotIsInstance(outcome, Exception)
        self.assertEqual((outcome.value, host.yields), (value, ["c-1"]))

    def test_a_wait_with_pending_input_returns(self):
        value = {"status": "input_pending", "inputs": ["event:3"]}
        outcome, host = run([{"kind": wire.REPLY_OK, "value": value}], lambda r: r.wait(1))
        self.assertEqual((outcome, host.yields), (value, []))

    def test_non_finite_seconds_are_refused_before_sending(self):
        for seconds in (float("nan"), float("inf"), float("-inf")):
            with self.subTest(seconds):
                outcome, host = run([], lambda r: r.wait(seconds))
                self.assertIsInstance(outcome, HostError)
                self.assertEqual((outcome.code, host.sent), ("invalid_request", []))


if __name__ == "__main__":
    unittest.main()


class RequestIdTest(unittest.TestCase):
    def test_an_id_awaiting_its_reply_is_refused_not_awaited_for_ever(self):
        loop = asyncio.new_event_loop()
        sent = []
        runtime = Runtime(lambda request_id, execution_id, request: sent.append(request_id))
        runtime.loop = loop
        runtime._ids = __import__("itertools").repeat(7)  # as cell code may reset it

        async def cell():
            EXECUTION_ID.set("c-1")
            first = asyncio.ensure_future(runtime.inspect())
            await asyncio.sleep(0)  # the first is sent and awaits its reply
            with self.assertRaises(HostError) as caught:
                await runtime.inspect()
            runtime.deliver("r-7", "c-1", OK)
            return await first, caught.exception.code

        try:
            self.assertEqual(loop.run_until_complete(asyncio.wait_for(cell(), 10)), ({"done": True}, "invalid_request"))
        finally:
            loop.close()
        self.assertEqual(sent, ["r-7"])
