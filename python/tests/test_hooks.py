"""The hooks worker end to end, with real subprocesses and the test playing the host; and
kiln's initial policy on its own."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import unittest

from kiln import wire
from kiln_hooks import (MAX_SEND_TEXT, TOP_PRIORITY, Allow, AttentionRequest, Defer,
                        DeliveryRequest, Hold, HookContext, Ignore, Wake)

PKGROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# kiln's initial release, the tree the Go host builds into the binary.
INITIAL = os.path.join(os.path.dirname(PKGROOT), "internal", "policy", "initial")
LAUNCHER = ("import sys; sys.path.insert(0, sys.argv[1]); from kiln.hooks import main; "
            "main(sys.argv[2:])")
SESSION, GENERATION, REVISION = "root", "g-1", "r1"
SLOTS = ["attention.plan", "delivery.review"]

# A release whose hooks come from a package of its own, importing a sibling module.
POLICY_HOOKS = '''
import asyncio
import sys

from kiln_hooks import Allow, Defer, Hold, Ignore, Wake
from policy import rules


def attention(request, context):
    print("attention on stdout")
    print("attention on stderr", file=sys.stderr)
    if request.source == "raise":
        raise rules.PolicyBroke("no plan for " + request.source)
    if request.source == "garbage":
        return {"action": "wake", "priority": 1}
    if request.source == "nothing":
        return None
    if request.source == "wrong-slot":
        return Allow()
    if request.source == "unsendable":
        return Wake(object())
    if request.source == "nan":
        return Defer(float("nan"))
    if request.source == "huge":
        return Ignore("x" * 2_000_000)
    if request.source == "huge-error":
        raise ValueError("x" * 100_000)
    if request.source == "context":
        return Ignore(f"{context.slot} {context.revision} {context.invocation_id}")
    return Wake(rules.PRIORITY)


async def delivery(request, context):
    await asyncio.sleep(0.01)
    if request.text == "raise":
        raise KeyError("after await")
    if request.text == "hold":
        return Hold("held by an async hook")
    return Allow()
'''

POLICY_RULES = '''
PRIORITY = 7


class PolicyBroke(Exception):
    """A failure of the test policy."""
'''

# A release of plain functions, reporting whether the worker has loaded asyncio.
PLAIN_HOOKS = '''
import sys

from kiln_hooks import Allow, Ignore


def attention(request, context):
    return Ignore("asyncio loaded" if "asyncio" in sys.modules else "asyncio not loaded")


def delivery(request, context):
    return Allow()
'''


def manifest(attention="policy.hooks:attention", delivery="policy.hooks:delivery"):
    """Return the text of a manifest naming the two entrypoints."""
    return json.dumps({"version": 1, "hooks": {"attention.plan": attention,
                                               "delivery.review": delivery}})


def make_release(files):
    """Write files (relative path -> text) into a new directory; return its path."""
    root = tempfile.mkdtemp(prefix="kiln-release-")
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as file:
            file.write(textwrap.dedent(text))
    return root


def policy_files(**manifest_args):
    """Return the files of a release of the test policy package."""
    return {"manifest.json": manifest(**manifest_args), "policy/__init__.py": "",
            "policy/hooks.py": POLICY_HOOKS, "policy/rules.py": POLICY_RULES}


class Process:
    """A hooks worker process started as the host starts one, with its socket listening."""

    def __init__(self, release=INITIAL):
        self.dir = tempfile.mkdtemp(prefix="kiln-test-")
        self.path = os.path.join(self.dir, "hooks.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(10)
        self.token = os.urandom(16).hex()
        self.stdout = open(os.path.join(self.dir, "stdout"), "w+b")
        self.stderr = open(os.path.join(self.dir, "stderr"), "w+b")
        argv = [sys.executable, "-I", "-c", LAUNCHER, PKGROOT, "--socket", self.path,
                "--session", SESSION, "--generation", GENERATION, "--revision", REVISION,
                "--release", release]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=self.stdout,
                                        stderr=self.stderr)
        self.process.stdin.write(self.token.encode() + b"\n")
        self.process.stdin.close()

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.listener.close()
        self.stdout.close()
        self.stderr.close()
        shutil.rmtree(self.dir)

    def exit_status(self, timeout=10):
        return self.process.wait(timeout)

    def output(self, file):
        # Read by position: the worker shares the file's offset (see test_worker.whole).
        fd = file.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")

    def diagnostics(self):
        return self.output(self.stderr)

    def connected(self):
        """Report whether the worker connected to the socket."""
        self.listener.setblocking(False)
        try:
            sock, _ = self.listener.accept()
        except BlockingIOError:
            return False
        sock.close()
        return True


class Host(Process):
    """A started hooks worker that has said hello, and the host's end of its socket."""

    def __init__(self, release=INITIAL):
        super().__init__(release)
        self.sock, _ = self.listener.accept()
        self.sock.settimeout(10)
        self.reader = self.sock.makefile("rb")
        self.hello = self.recv()
        self.ids = 0

    def close(self):
        self.reader.close()
        self.sock.close()
        super().close()

    def send(self, kind, **fields):
        """Send a message; a shutdown is followed by SIGINT, as the host sends it."""
        wire.write_frame(self.sock, wire.encode(SESSION, GENERATION, kind, fields))
        if kind == wire.SHUTDOWN:
            self.process.send_signal(signal.SIGINT)

    def recv(self):
        """Return the next message as (kind, message)."""
        return wire.decode(wire.read_frame(self.reader), SESSION, GENERATION)

    def next_id(self):
        self.ids += 1
        return f"h-{self.ids}"

    def completed(self, operation_id):
        """Wait for the completion of operation_id; return its result."""
        kind, message = self.recv()
        if (kind, message["id"]) != (wire.COMPLETED, operation_id):
            raise AssertionError(f"expected completed {operation_id}, got {kind} {message}")
        return message["result"]

    def invoke(self, slot, request):
        """Invoke slot with request; return the result."""
        invocation_id = self.next_id()
        self.send(wire.INVOKE, id=invocation_id, slot=slot, input=request)
        return self.completed(invocation_id)

    def attention(self, source, event_id=1):
        return self.invoke("attention.plan", {"event_id": event_id, "source": source,
                                              "received_at_ms": 1700000000000})

    def delivery(self, text, destination="operator"):
        return self.invoke("delivery.review", {"effect_id": 1, "destination": destination,
                                               "text": text})


def hook(value):
    """Return the result of a hook that decided value."""
    return {"kind": wire.RESULT_HOOK, "value": value}


class HostTestCase(unittest.TestCase):
    release = None  # the release files the worker serves, or None for the initial release

    def setUp(self):
        self.release_dir = INITIAL
        if self.release is not None:
            self.release_dir = make_release(self.release)
            self.addCleanup(shutil.rmtree, self.release_dir)
        self.host = Host(self.release_dir)
        self.addCleanup(self.host.close)

    def assertFailed(self, result, *fragments):
        self.assertEqual(result["kind"], wire.RESULT_FAILED, result)
        for fragment in fragments:
            self.assertIn(fragment, result["error"])


class DefaultPolicyTest(HostTestCase):
    def test_hello(self):
        self.assertEqual(self.host.hello, (wire.HELLO, {
            "kind": wire.HELLO, "token": self.host.token, "role": wire.ROLE_HOOKS,
            "revision": REVISION, "slots": SLOTS}))

    def test_attention_by_source(self):
        for source, value in [
            ("operator", {"action": "wake", "priority": TOP_PRIORITY}),
            ("peer", {"action": "wake", "priority": 80}),
            ("discord.dm", {"action": "wake", "priority": 60}),
            ("discord.mention", {"action": "wake", "priority": 40}),
            ("discord.ambient", {"action": "defer", "seconds": 600}),
        ]:
            self.assertEqual(self.host.attention(source), hook(value), source)
        ignored = self.host.attention("email")
        self.assertEqual(ignored["value"]["action"], "ignore")
        self.assertIn("unknown source 'email'", ignored["value"]["reason"])

    def test_delivery(self):
        self.assertEqual(self.host.delivery("hello"), hook({"action": "allow"}))
        self.assertEqual(self.host.delivery("x" * MAX_SEND_TEXT), hook({"action": "allow"}))
        for text, destination, why in [("", "operator", "empty"),
                                       ("x" * (MAX_SEND_TEXT + 1), "operator", "4001"),
                                       ("hello", "discord.dm", "'discord.dm'")]:
            result = self.host.delivery(text, destination)
            self.assertEqual(result["value"]["action"], "hold", result)
            self.assertIn(why, result["value"]["reason"])

    def test_malformed_input_fails_and_the_worker_serves_on(self):
        good = {"event_id": 1, "source": "operator", "received_at_ms": 2}
        for fields, why in [
            ({"event_id": 1, "source": "operator"}, "missing field 'received_at_ms'"),
            (dict(good, extra=1), "unknown field 'extra'"),
            (dict(good, event_id=True), "field 'event_id' must be int, not bool"),
            (dict(good, event_id=1.0), "field 'event_id' must be int, not float"),
            (dict(good, source=None), "field 'source' must be str, not NoneType"),
            ({}, "missing field 'event_id'"),
        ]:
            self.assertFailed(self.host.invoke("attention.plan", fields),
                              "malformed attention.plan input", why)
        self.assertFailed(self.host.invoke("delivery.review", good),
                          "malformed delivery.review input", "unknown field 'event_id'")
        self.assertEqual(self.host.attention("operator")["kind"], wire.RESULT_HOOK)

    def test_input_out_of_bounds_is_refused_before_the_hook(self):
        good = {"event_id": 1, "source": "operator", "received_at_ms": 0}
        for fields, why in [(dict(good, event_id=0), "event_id must be > 0, got 0"),
                            (dict(good, event_id=-5), "event_id must be > 0, got -5"),
                            (dict(good, received_at_ms=-1), "received_at_ms must be >= 0, got -1")]:
            self.assertFailed(self.host.invoke("attention.plan", fields),
                              "invalid attention.plan input", why, "the hook was not called")
        self.assertEqual(self.host.invoke("attention.plan", good)["kind"], wire.RESULT_HOOK)
        self.assertFailed(self.host.invoke("delivery.review", {"effect_id": 0, "destination": "operator",
                                                               "text": "x"}),
                          "invalid delivery.review input", "effect_id must be > 0, got 0")

    def test_unknown_slot(self):
        self.assertFailed(self.host.invoke("reply.draft", {}), "unknown slot 'reply.draft'")

    def test_execute_is_refused_and_interrupt_ignored(self):
        self.host.send(wire.EXECUTE, id="c-1", code="1 + 1")
        self.assertEqual(self.host.completed("c-1"), {
            "kind": wire.RESULT_FAILED,
            "error": "execute is for the workbench role; this is a hooks worker"})
        self.host.send(wire.INTERRUPT, id="h-9")
        self.host.process.send_signal(signal.SIGINT)
        self.assertEqual(self.host.delivery("still here"), hook({"action": "allow"}))

    def test_shutdown_exits_zero(self):
        self.host.send(wire.SHUTDOWN)
        self.assertEqual(self.host.exit_status(), 0)

    def test_host_closing_the_connection(self):
        self.host.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(self.host.exit_status(), 2)
        self.assertIn("the host closed the connection", self.host.diagnostics())

    def test_frame_that_does_not_decode(self):
        wire.write_frame(self.host.sock, wire.encode(SESSION, "g-0", wire.SHUTDOWN, {}))
        self.assertEqual(self.host.exit_status(), 2)
        self.assertIn("mismatch", self.host.diagnostics())

    def test_host_reply(self):
        self.host.send(wire.HOST_REPLY, id="r-1", execution_id="c-1",
                       reply={"kind": "ok", "value": 1})
        self.assertEqual(self.host.exit_status(), 2)
        self.assertIn("the host sent a host_reply message", self.host.diagnostics())


class ReleaseTest(HostTestCase):
    release = policy_files()

    def test_hello(self):
        self.assertEqual(self.host.hello[1]["slots"], SLOTS)
        self.assertEqual(self.host.hello[1]["revision"], REVISION)

    def test_sync_hook_using_the_release_modules(self):
        self.assertEqual(self.host.attention("anything"), hook({"action": "wake", "priority": 7}))

    def test_context(self):
        self.host.ids = 41
        self.assertEqual(self.host.attention("context"),
                         hook({"action": "ignore", "reason": "attention.plan r1 h-42"}))

    def test_async_hook(self):
        self.assertEqual(self.host.delivery("hold"),
                         hook({"action": "hold", "reason": "held by an async hook"}))
        self.assertEqual(self.host.delivery("send"), hook({"action": "allow"}))

    def test_raising_hooks_fail_alone(self):
        self.assertFailed(self.host.attention("raise"), "the attention.plan hook raised",
                          "policy.rules.PolicyBroke: no plan for raise")
        self.assertEqual(self.host.attention("next")["kind"], wire.RESULT_HOOK)
        self.assertFailed(self.host.delivery("raise"), "the delivery.review hook raised",
                          "KeyError: 'after await'")
        self.assertEqual(self.host.delivery("send"), hook({"action": "allow"}))

    def test_long_error_is_bounded(self):
        result = self.host.attention("huge-error")
        self.assertFailed(result, "the attention.plan hook raised ValueError: xxx")
        self.assertEqual(len(result["error"].encode()), wire.MAX_ERROR_BYTES)

    def test_what_is_not_a_decision_of_the_slot_fails(self):
        for source, returned in [("garbage", "dict"), ("nothing", "NoneType"),
                                 ("wrong-slot", "Allow")]:
            self.assertFailed(self.host.attention(source),
                              f"the attention.plan hook returned {returned}, "
                              "not one of Wake, Defer, Ignore")
        for source, why in [("unsendable", "TypeError"), ("nan", "ValueError"),
                            ("huge", "FrameSizeError")]:
            self.assertFailed(self.host.attention(source),
                              "the attention.plan hook's decision cannot be sent", why)
        self.assertEqual(self.host.attention("next")["kind"], wire.RESULT_HOOK)

    def test_release_directory_is_left_as_it_was(self):
        self.assertEqual(self.host.attention("x")["kind"], wire.RESULT_HOOK)
        self.assertEqual(sorted(os.listdir(os.path.join(self.release_dir, "policy"))),
                         ["__init__.py", "hooks.py", "rules.py"])

    def test_printing_goes_to_the_real_streams(self):
        self.host.attention("anything")
        self.host.send(wire.SHUTDOWN)
        self.assertEqual(self.host.exit_status(), 0)
        self.assertEqual(self.host.output(self.host.stdout), "attention on stdout\n")
        self.assertEqual(self.host.diagnostics(), "attention on stderr\n")


class PlainReleaseTest(HostTestCase):
    release = {"manifest.json": manifest("plain:attention", "plain:delivery"),
               "plain.py": PLAIN_HOOKS}

    def test_asyncio_is_not_loaded(self):
        self.assertEqual(self.host.attention("operator"),
                         hook({"action": "ignore", "reason": "asyncio not loaded"}))
        self.assertEqual(self.host.delivery("x"), hook({"action": "allow"}))


EXECUTION_HOOKS = '''
from kiln_hooks import Allow, Hold


def attention(request, context):
    return Allow()


def delivery(request, context):
    return Allow()


def execution(request, context):
    if "rm" in request.code:
        return Hold(f"{request.cell} of turn {request.turn} removes files")
    return Allow()
'''


class ExecutionReviewTest(HostTestCase):
    """A release may name execution.review beside the two slots every release names."""

    release = {"manifest.json": json.dumps({"version": 1, "hooks": {
        "attention.plan": "ex:attention", "delivery.review": "ex:delivery",
        "execution.review": "ex:execution"}}), "ex.py": EXECUTION_HOOKS}

    def review(self, code, turn=1, cell="c-1"):
        return self.host.invoke("execution.review", {"turn": turn, "cell": cell, "code": code})

    def test_hello_lists_the_slot(self):
        self.assertEqual(self.host.hello[1]["slots"], SLOTS + ["execution.review"])

    def test_allow_and_hold(self):
        self.assertEqual(self.review("print(1)"), hook({"action": "allow"}))
        self.assertEqual(self.review("rm('x')", 3, "c-9"),
                         hook({"action": "hold", "reason": "c-9 of turn 3 removes files"}))

    def test_input_is_checked_before_the_hook(self):
        self.assertFailed(self.review("x", turn=0), "invalid execution.review input",
                          "turn must be > 0, got 0")
        self.assertFailed(self.review("x", cell=""), "cell must not be empty")
        self.assertFailed(self.host.invoke("execution.review", {"turn": 1, "cell": "c-1"}),
                          "missing field 'code'")


class StartupFailureTest(unittest.TestCase):
    """A policy that does not load ends the worker with status 2 before it connects."""

    def refused(self, files):
        """Start a worker on a release of files; return its diagnostics once it fails."""
        release = make_release(files)
        self.addCleanup(shutil.rmtree, release)
        process = Process(release)
        self.addCleanup(process.close)
        self.assertEqual(process.exit_status(), 2)
        self.assertFalse(process.connected())
        diagnostics = process.diagnostics()
        self.assertTrue(diagnostics.startswith("kiln hooks: "), diagnostics)
        self.assertEqual(diagnostics.count("\n"), 1, diagnostics)
        return diagnostics

    def test_manifest_missing(self):
        diagnostics = self.refused({"policy/hooks.py": POLICY_HOOKS})
        self.assertIn("cannot read the manifest", diagnostics)
        self.assertIn("manifest.json: No such file or directory", diagnostics)

    def test_manifest_not_json(self):
        self.assertIn("manifest.json is not valid JSON",
                      self.refused({"manifest.json": "{version: 1}"}))
        self.assertIn("names one member twice", self.refused(
            {"manifest.json": '{"version": 1, "version": 1, "hooks": {}}'}))

    def test_manifest_shape(self):
        for document, why in [
            ([], "want a JSON object"),
            ({"version": 1}, "want exactly the members 'version' and 'hooks'"),
            ({"version": 2, "hooks": {}}, "version must be 1, got 2"),
            ({"version": True, "hooks": {}}, "version must be 1, got true"),
            ({"version": 1, "hooks": []}, "'hooks' must be an object"),
            ({"version": 1, "hooks": {"attention.plan": "a:b"}},
             "'hooks' has no entrypoint for the slot delivery.review"),
            ({"version": 1, "hooks": {"attention.plan": "a:b", "delivery.review": "a:b",
                                      "reply.draft": "a:b"}},
             "'hooks' names the unknown slot 'reply.draft'"),
            ({"version": 1, "hooks": {"attention.plan": 1, "delivery.review": "a:b"}},
             "the entrypoint of attention.plan must be a 'module:attribute' string"),
        ]:
            diagnostics = self.refused({"manifest.json": json.dumps(document)})
            self.assertIn("is malformed: " + why, diagnostics)

    def test_entrypoint_format(self):
        self.assertIn("delivery.review: entrypoint 'policy.hooks.delivery': want "
                      "'module:attribute'",
                      self.refused(policy_files(delivery="policy.hooks.delivery")))

    def test_import_fails(self):
        diagnostics = self.refused(policy_files(attention="policy.absent:attention"))
        self.assertIn("attention.plan: entrypoint 'policy.absent:attention': cannot import "
                      "policy.absent: ModuleNotFoundError", diagnostics)
        diagnostics = self.refused({"manifest.json": manifest("broken:f", "broken:f"),
                                    "broken.py": "def f(a, b):\n    return (\n"})
        self.assertIn("attention.plan: entrypoint 'broken:f': cannot import broken: "
                      "SyntaxError", diagnostics)

    def test_missing_attribute(self):
        self.assertIn("delivery.review: entrypoint 'policy.hooks:review': cannot get review "
                      "from policy.hooks: AttributeError",
                      self.refused(policy_files(delivery="policy.hooks:review")))

    def test_attribute_not_callable(self):
        self.assertIn("attention.plan: entrypoint 'policy.rules:PRIORITY': PRIORITY is not "
                      "callable (type int)",
                      self.refused(policy_files(attention="policy.rules:PRIORITY")))

    def test_wrong_signature(self):
        files = {"manifest.json": manifest("one:attention", "one:delivery"),
                 "one.py": "def attention(request):\n    pass\n\n"
                           "def delivery(request, context):\n    pass\n"}
        self.assertIn("attention.plan: entrypoint 'one:attention': attention(request) cannot "
                      "be called as hook(request, context)", self.refused(files))


def load_initial():
    """Import the initial release's module from its tree; return it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kiln_defaults",
                                                  os.path.join(INITIAL, "kiln_defaults.py"))
    module = importlib.util.module_from_spec(spec)
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # leave the tree as it is
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = saved
    return module


class DefaultsTest(unittest.TestCase):
    """The initial release's hooks called directly."""

    context = HookContext("attention.plan", "r1", "h-1")

    def test_attention(self):
        def plan(source):
            return load_initial().attention(AttentionRequest(1, source, 0), self.context)

        self.assertEqual(plan("operator"), Wake(TOP_PRIORITY))
        self.assertEqual(plan("peer"), Wake(80))
        self.assertEqual(plan("discord.dm"), Wake(60))
        self.assertEqual(plan("discord.mention"), Wake(40))
        self.assertEqual(plan("discord.ambient"), Defer(600))
        self.assertIsInstance(plan("sms"), Ignore)

    def test_delivery(self):
        def review(destination, text):
            return load_initial().delivery(DeliveryRequest(1, destination, text), self.context)

        self.assertEqual(review("operator", "x"), Allow())
        self.assertIsInstance(review("operator", ""), Hold)
        self.assertIsInstance(review("operator", "x" * (MAX_SEND_TEXT + 1)), Hold)
        self.assertIsInstance(review("discord.dm", "x"), Hold)

    def test_decisions_to_json(self):
        self.assertEqual(Wake(5).to_json(), {"action": "wake", "priority": 5})
        self.assertEqual(Defer(1.5).to_json(), {"action": "defer", "seconds": 1.5})
        self.assertEqual(Ignore("r").to_json(), {"action": "ignore", "reason": "r"})
        self.assertEqual(Allow().to_json(), {"action": "allow"})
        self.assertEqual(Hold("r").to_json(), {"action": "hold", "reason": "r"})


if __name__ == "__main__":
    unittest.main()
