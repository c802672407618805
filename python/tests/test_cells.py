"""kiln.cells: compiling and running cells, results and ``_``, and their tracebacks."""
import asyncio
import os
import re
import traceback
import unittest

import kiln.cells
from kiln.cells import Interpreter, format_exception

# The runtime's own source directory, whose frames a traceback shown to a cell hides.
RUNTIME_DIR = os.path.dirname(os.path.abspath(kiln.cells.__file__)) + os.sep
FRAME_FILE = re.compile(r'^\s*File "([^"]*)"', re.MULTILINE)


class CellsTest(unittest.TestCase):
    def setUp(self):
        self.loop = asyncio.new_event_loop()
        self.namespace = {}
        self.interpreter = Interpreter(self.namespace)
        self.count = 0

    def tearDown(self):
        self.loop.close()

    def run_cell(self, source):
        """Run source as the next cell, as the worker does; return its displayed result."""
        self.count += 1
        return self.loop.run_until_complete(self.execute(source))

    async def execute(self, source):
        """Compile and run source: in a task when it awaits, directly when not."""
        compiled = self.interpreter.compile(source, f"t{self.count}")
        if compiled.awaits:
            return await self.interpreter.run_async(compiled)
        return self.interpreter.run(compiled)

    def error_of(self, source):
        """Run source as the next cell, which must raise; return its formatted traceback.

        The exception is caught inside the task, as the worker catches it. The traceback
        Python itself would print must show a frame of the runtime, so that hiding them is
        what the caller checks.
        """
        self.count += 1

        async def attempt():
            try:
                await self.execute(source)
            except Exception as exc:
                unfiltered = "".join(traceback.format_exception(exc))
                self.assertTrue(runtime_frames(unfiltered), unfiltered)
                return format_exception(exc)
            self.fail(f"{source!r} raised nothing")

        return self.loop.run_until_complete(attempt())

    def assertNoRuntimeFrames(self, error):
        """Check that error shows no frame of the runtime's own source files."""
        self.assertEqual(runtime_frames(error), [], error)

    def test_final_expression_and_underscore(self):
        self.assertIsNone(self.run_cell("x = 20"))
        self.assertEqual(self.run_cell("x + 1"), "21")
        self.assertEqual(self.run_cell("_ * 2"), "42")
        self.assertEqual(self.run_cell("y = _\ny + 0"), "42")
        self.assertIsNone(self.run_cell("None"))
        self.assertEqual(self.run_cell("_"), "42")  # None does not rebind _
        self.assertEqual(self.run_cell("'a' + 'b';"), "'ab'")
        self.assertIsNone(self.run_cell("z = 1\nif z:\n    z"))  # the last statement is an if
        self.assertIsNone(self.run_cell("# only a comment"))
        self.assertIsNone(self.run_cell(""))

    def test_future_flags_persist(self):
        with self.assertRaises(NameError):
            self.run_cell("def f(a: undefined_name): pass")
        self.assertIsNone(self.run_cell("from __future__ import annotations"))
        self.assertEqual(self.run_cell("def g(a: undefined_name): pass\ng.__annotations__"),
                         "{'a': 'undefined_name'}")
        self.assertEqual(self.run_cell("(lambda: None).__code__.co_flags & 0x1000000 != 0"), "True")

    def test_a_failed_future_import_changes_nothing(self):
        error = self.error_of("from __future__ import braces")
        self.assertIn("SyntaxError", error)
        with self.assertRaises(NameError):
            self.run_cell("def f(a: undefined_name): pass")

    def test_top_level_await(self):
        self.assertEqual(self.run_cell("import asyncio\nawait asyncio.sleep(0)\n5"), "5")
        self.assertEqual(self.run_cell("await asyncio.sleep(0, result=7)"), "7")
        self.assertIsNone(self.run_cell("r = await asyncio.sleep(0, result=8)"))
        self.assertEqual(self.run_cell("r"), "8")
        self.assertEqual(self.run_cell("[await asyncio.sleep(0, result=i) for i in range(3)]"),
                         "[0, 1, 2]")

    def test_definitions_persist(self):
        self.run_cell("def double(v):\n    return 2 * v")
        self.run_cell("class Box:\n    def __repr__(self):\n        return 'Box()'")
        self.assertEqual(self.run_cell("double(21), Box()"), "(42, Box())")

    def test_traceback_shows_cell_lines_and_hides_kiln(self):
        self.run_cell("def inner():\n    return 1 / 0")
        error = self.error_of("x = 1\ninner()")
        self.assertIn('File "<cell-t2>", line 2, in <module>\n    inner()', error)
        self.assertIn('File "<cell-t1>", line 2, in inner\n    return 1 / 0', error)
        self.assertTrue(error.endswith("ZeroDivisionError: division by zero\n"), error)
        self.assertNoRuntimeFrames(error)
        self.assertNotIn("\x1b[", error)

    def test_chained_tracebacks_hide_kiln(self):
        source = ("from kiln.output import cap_error_text\n"
                  "try:\n"
                  "    cap_error_text(None)\n"
                  "except AttributeError as exc:\n"
                  "    raise KeyError('outer') from exc")
        error = self.error_of(source)
        self.assertIn("AttributeError", error)
        self.assertIn("direct cause", error)
        self.assertIn('File "<cell-t1>", line 3', error)
        self.assertIn('File "<cell-t1>", line 5', error)
        self.assertNoRuntimeFrames(error)
        self.assertNotIn("output.py", error)

    def test_syntax_error_shows_as_usual(self):
        error = self.error_of("x = 1\ny = = 2")
        self.assertIn('File "<cell-t1>", line 2\n    y = = 2\n', error)
        self.assertNoRuntimeFrames(error)
        self.assertIn("SyntaxError: invalid syntax", error)

    def test_result_repr_errors_propagate(self):
        self.run_cell("class Bad:\n    def __repr__(self):\n        raise ValueError('no repr')")
        error = self.error_of("Bad()")
        self.assertIn("ValueError: no repr", error)
        self.assertIn('File "<cell-t1>", line 3, in __repr__', error)


def runtime_frames(text):
    """The files of the frames in the traceback text that are the runtime's own."""
    return [name for name in FRAME_FILE.findall(text)
            if os.path.abspath(name).startswith(RUNTIME_DIR)]


if __name__ == "__main__":
    unittest.main()
