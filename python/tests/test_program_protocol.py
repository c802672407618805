"""kiln.protocol: the fd-3 wire vocabulary as docs/programs.md declares it."""

import json
import os
import subprocess
import sys
import unittest

from kiln import protocol

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Vocabulary(unittest.TestCase):
    def test_fd_and_marker(self):
        self.assertEqual(protocol.PROTOCOL_FD, 3)
        self.assertEqual(protocol.log_truncation_marker(65536), "[kiln] log capture truncated at 65536 bytes")
        self.assertEqual(protocol.log_truncation_marker(0), "[kiln] log capture truncated at 0 bytes")
        for bad in (-1, 1.5, True, "1"):
            with self.assertRaises(ValueError):
                protocol.log_truncation_marker(bad)

    def test_field_sets(self):
        self.assertEqual(protocol.field_sets(), {
            "boot": {"required": ["addressSpaceBytes", "cpuSeconds", "maxLogBytes", "maxValueBytes", "namespaces", "type"],
                     "optional": []},
            "namespace": {"required": ["global", "names"], "optional": ["errorClass"]},
            "errorClass": {"required": ["memberNameProperty", "name"], "optional": []},
            "run": {"required": ["program", "type"], "optional": []},
            "reply": {"required": ["id", "ok", "type"], "optional": ["message", "value"]},
            "boot-ack": {"required": ["type"], "optional": []},
            "call": {"required": ["args", "global", "id", "name", "type"], "optional": []},
            "log": {"required": ["text", "type"], "optional": ["open", "truncated"]},
            "done": {"required": ["type"], "optional": ["error", "value"]},
            "done.error": {"required": ["kind", "message"], "optional": []},
        })

    def test_typed_dicts_carry_the_sets(self):
        self.assertEqual(protocol.Namespace.__required_keys__, frozenset({"global", "names"}))
        self.assertEqual(protocol.Namespace.__optional_keys__, frozenset({"errorClass"}))
        self.assertEqual(protocol.ReplyOk.__required_keys__, frozenset({"type", "id", "ok", "value"}))
        self.assertEqual(protocol.ReplyErr.__required_keys__, frozenset({"type", "id", "ok", "message"}))
        self.assertEqual(protocol.Log.__optional_keys__, frozenset({"truncated", "open"}))
        self.assertEqual(protocol.ERROR_KINDS, ("exception", "invalid-output", "output-limit"))

    def test_command_line_for_the_go_mirror_test(self):
        out = subprocess.run([sys.executable, "-I", "-c",
                              "import sys; sys.path.insert(0, sys.argv[1]); import runpy; runpy.run_module('kiln.protocol', run_name='__main__')",
                              PYTHON_DIR], capture_output=True, check=True)
        got = json.loads(out.stdout)
        self.assertEqual(got["fd"], 3)
        self.assertEqual(got["marker"], "[kiln] log capture truncated at 0 bytes")
        self.assertEqual(got["frames"], protocol.field_sets())


if __name__ == "__main__":
    unittest.main()
