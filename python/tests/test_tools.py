"""The tools object of a cell: the catalog as async functions over tools.call."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from kiln import tools as toolset
from kiln import wire
from kiln.runtime import HostError
from tests.test_runtime import run

ENTRIES = [
    {"namespace": "demo", "name": "get-sum", "attr": "get_sum", "description": "Add a and b.",
     "input_schema": {"type": "object", "required": ["a", "b"]}},
    {"namespace": "demo", "name": "echo", "attr": "echo", "description": ""},
    {"namespace": "fs", "name": "read", "attr": "read", "description": "Read a file."},
    {"namespace": "fs", "name": "_name", "attr": "_name", "description": "Named like an internal."},
]


def call(reply, make_call):
    """Run make_call(tools) in a cell whose one request gets reply; return (outcome, sent)."""
    outcome, host = run([reply], lambda runtime: make_call(toolset.build(runtime, ENTRIES)))
    return outcome, [frame[1]["request"] for frame in host.sent]


class ToolsTest(unittest.TestCase):
    def test_namespaces_and_tools_are_listed(self):
        tools = toolset.build(None, ENTRIES)
        self.assertEqual(dir(tools), ["demo", "fs"])
        self.assertEqual(dir(tools.demo), ["echo", "get_sum"])
        self.assertEqual(tools.fs._name.__qualname__, "tools.fs._name")
        self.assertEqual(repr(tools), "<tools: demo, fs>")
        self.assertEqual(repr(toolset.Tools({})), "<tools: none>")
        with self.assertRaisesRegex(AttributeError, "no tool namespace 'nope'; the host offers: demo, fs"):
            tools.nope
        with self.assertRaisesRegex(AttributeError, "tools.demo has no tool 'nope'; it has: echo, get_sum"):
            tools.demo.nope

    def test_a_tool_documents_itself(self):
        f = toolset.build(None, ENTRIES).demo.get_sum
        self.assertEqual((f.__name__, f.__qualname__, f.__module__), ("get_sum", "tools.demo.get_sum", "tools.demo"))
        self.assertTrue(f.__doc__.startswith("Add a and b.\n\nInput schema"))
        self.assertIn('"required": [\n    "a",\n    "b"\n  ]', f.__doc__)
        self.assertEqual(toolset.build(None, ENTRIES).demo.echo.__doc__, "(no description)")

    def test_a_call_is_a_tools_call_request(self):
        outcome, sent = call({"kind": wire.REPLY_OK, "value": {"sum": 3}}, lambda t: t.demo.get_sum(a=1, b=2))
        self.assertEqual(outcome, {"sum": 3})
        self.assertEqual(sent, [{"method": "tools.call", "namespace": "demo", "name": "get-sum",
                                 "arguments": {"a": 1, "b": 2}}])

    def test_a_refusal_raises_tool_error(self):
        reply = {"kind": wire.REPLY_ERROR, "code": "tool_error", "message": "it failed"}
        outcome, _ = call(reply, lambda t: t.fs.read(path="x"))
        self.assertIsInstance(outcome, toolset.ToolError)
        self.assertIsInstance(outcome, HostError)
        self.assertEqual((outcome.code, outcome.message), ("tool_error", "it failed"))

    def test_arguments_are_keywords_only(self):
        outcome, sent = call({"kind": wire.REPLY_OK, "value": None}, lambda t: t.demo.echo("positional"))
        self.assertIsInstance(outcome, TypeError)
        self.assertEqual(sent, [])

    def test_load_reads_and_removes_the_catalog(self):
        self.assertEqual(dir(toolset.load(None)), [])
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "tools.json")
            with open(path, "w") as f:
                json.dump({"tools": ENTRIES}, f)
            self.assertEqual(dir(toolset.load(None, path)), ["demo", "fs"])
            self.assertFalse(os.path.exists(path))

    def test_a_malformed_catalog_ends_the_worker(self):
        for catalog in ('{"tools": 1}', '{"tools": [{"namespace": "a b", "name": "x", "attr": "x", "description": ""}]}',
                        'not json'):
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "tools.json")
                with open(path, "w") as f:
                    f.write(catalog)
                root = os.path.dirname(os.path.dirname(os.path.abspath(toolset.__file__)))
                proc = subprocess.run([sys.executable, "-I", "-c",
                                       f"import sys; sys.path.insert(0, {root!r}); from kiln import tools; tools.load(None, {path!r})"],
                                      capture_output=True, text=True)
                self.assertEqual(proc.returncode, 2, catalog)
                self.assertIn("kiln worker: the tools file is malformed", proc.stderr)


if __name__ == "__main__":
    unittest.main()
