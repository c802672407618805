"""kiln.program end to end: a real `python3 -I -c <launcher>` child, the test as its host.

Every test starts a child as docs/programs.md says (see tests/test_program_host.py)
and talks to it over a real socketpair on fd 3.
"""

import json
import os
import resource
import signal
import sys
import textwrap
import unittest

from kiln import protocol
from tests import test_program_host as H


def run(program, **kw):
    return H.run(textwrap.dedent(program), **kw)


class Completion(unittest.TestCase):
    def assertClean(self, r):
        self.assertEqual(r.returncode, 0, (r.frames, r.stderr))
        self.assertEqual(r.after_done, [])
        self.assertEqual(r.stderr, b"")

    def test_return_one(self):
        r = run("return 1")
        self.assertEqual(r.frames[0], {"type": "boot-ack"})
        self.assertEqual(r.done_raw, b'{"type":"done","value":1}')
        self.assertClean(r)

    def test_falling_off_the_end_is_null(self):
        for program in ("x = 1", "", "# nothing", "return", "return None"):
            with self.subTest(program=program):
                r = run(program)
                self.assertEqual(r.done_raw, b'{"type":"done"}')
                self.assertClean(r)

    def test_top_level_await(self):
        r = run("""
            import asyncio
            await asyncio.sleep(0)
            async def twice(x):
                await asyncio.sleep(0)
                return 2 * x
            return await twice(21)
        """)
        self.assertEqual(r.done, {"type": "done", "value": 42})

    def test_numbers_round_trip(self):
        r = run("return [1.0, 1e-7, 1e21, 2**60, 5e-324, 0.1, -2.5, 2**53, True, None]")
        self.assertEqual(r.done_raw, b'{"type":"done","value":[1,1e-7,1e+21,1152921504606846976,5e-324,0.1,-2.5,9007199254740992,true,null]}')

    def test_strings_and_key_order(self):
        r = run(r'return {"b": "\ud800", "a": "é😀\n", "10": 1, "2": 2}')
        self.assertEqual(r.done_raw, '{"type":"done","value":{"2":2,"10":1,"b":"\\ud800","a":"é😀\\n"}}'.encode())

    def test_not_lossless(self):
        cases = [
            ("return 2**53 + 1", "integer 9007199254740993 is not exactly representable as a double at $"),
            ("return -0.0", "-0 at $"),
            ("return [1, 2, float('nan')]", "NaN at $[2]"),
            ("return {'x': float('inf')}", "Infinity at $.x"),
            ("return {1, 2}", "set at $"),
            ("return (1, 2)", "tuple at $"),
            ("return {1: 0, '1': 0}", "non-string key (int) at $"),
            ("a = []\na.append(a)\nreturn a", "cycle at $[0]"),
            ("class S(str): pass\nreturn [S('x')]", "S (a subclass of str) at $[0]"),
            ("import collections\nreturn collections.OrderedDict(a=1)", "collections.OrderedDict (a subclass of dict) at $"),
            ("return object()", "value of type object at $"),
        ]
        for program, reason in cases:
            with self.subTest(program=program):
                r = run(program)
                self.assertEqual(r.done, {"type": "done", "error": {
                    "kind": "invalid-output", "message": "completion value is not lossless JSON: " + reason}})
                self.assertClean(r)

    def test_output_limit(self):
        r = run("return 'x' * 98", maxValueBytes=100)  # 100 bytes of JSON: fits
        self.assertEqual(r.done, {"type": "done", "value": "x" * 98})
        r = run("return 'x' * 99", maxValueBytes=100)  # 101: over
        self.assertEqual(r.done["error"], {"kind": "output-limit", "message": "completion value exceeded 100 bytes"})
        # over budget wins over not lossless, whatever the order
        for program in ("return [float('nan'), 'x' * 100]", "return ['x' * 100, float('nan')]", "return {'a': {1, 2}, 'b': 'x' * 100}"):
            with self.subTest(program=program):
                r = run(program, maxValueBytes=50)
                self.assertEqual(r.done["error"]["kind"], "output-limit")
                self.assertClean(r)

    def test_budget_edge(self):
        r = run("return 'é'", maxValueBytes=4)
        self.assertEqual(r.done, {"type": "done", "value": "é"})
        r = run("return 'é'", maxValueBytes=3)
        self.assertEqual(r.done["error"]["kind"], "output-limit")
        r = run("return 'éx'", maxValueBytes=4)
        self.assertEqual(r.done["error"]["kind"], "output-limit")

    def test_deep_completion(self):
        r = run("""
            v = []
            for _ in range(10_000):
                v = [v]
            return v
        """, maxValueBytes=20_002)
        self.assertEqual(r.done_raw, b'{"type":"done","value":' + b"[" * 10_001 + b"]" * 10_001 + b"}")
        self.assertClean(r)
        r = run("""
            v = []
            for _ in range(10_000):
                v = [v]
            return v
        """, maxValueBytes=20_001)
        self.assertEqual(r.done["error"]["kind"], "output-limit")

    def test_large_flat_completion(self):
        r = run("return [0] * 6_000_000")
        self.assertEqual(r.done["error"], {"kind": "output-limit", "message": "completion value exceeded 32768 bytes"})
        self.assertClean(r)
        r = run("return [0] * 6_000_000", maxValueBytes=12_000_001, addressSpaceBytes=1 << 30)
        self.assertClean(r)
        self.assertEqual(r.done_raw, b'{"type":"done","value":[' + b",".join([b"0"] * 6_000_000) + b"]}")


class Exceptions(unittest.TestCase):
    def error(self, program, **kw):
        r = run(program, **kw)
        self.assertEqual(r.returncode, 0, (r.frames, r.stderr))
        self.assertEqual(r.after_done, [])
        self.assertEqual(r.done["error"]["kind"], "exception", r.done)
        return r.done["error"]["message"]

    def test_traceback_keeps_model_frames_only(self):
        message = self.error("""
            import json
            def parse(text):
                return json.loads(text)
            parse("{")
        """)
        self.assertEqual(message, textwrap.dedent("""\
            Traceback (most recent call last):
              File "<model>", line 5, in <module>
                parse("{")
              File "<model>", line 4, in parse
                return json.loads(text)
            json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"""))
        self.assertNotIn("kiln", message)

    def test_chain(self):
        message = self.error("""
            try:
                1 / 0
            except ZeroDivisionError as e:
                raise ValueError("bad") from e
        """)
        self.assertIn("ZeroDivisionError: division by zero\n\nThe above exception was the direct cause", message)
        self.assertTrue(message.endswith('raise ValueError("bad") from e\nValueError: bad'), message)
        message = self.error("""
            try:
                {}["k"]
            except KeyError:
                raise RuntimeError("then")
        """)
        self.assertIn("KeyError: 'k'\n\nDuring handling of the above exception, another exception occurred:", message)

    def test_chain_cut_at_100_links(self):
        message = self.error("""
            e = None
            for i in range(150):
                try:
                    raise ValueError(i) from e
                except ValueError as x:
                    e = x
            raise e
        """)
        self.assertTrue(message.startswith("[kiln] exception chain truncated at 100 links\n"), message[:200])
        self.assertEqual(message.count("ValueError: "), 100)
        self.assertTrue(message.endswith("ValueError: 149"))

    def test_message_capped(self):
        message = self.error("raise ValueError('é' * 10_000)", maxValueBytes=1000)
        data = message.encode("utf-8")
        self.assertLessEqual(len(data), 1000)
        self.assertGreaterEqual(len(data), 998)
        self.assertTrue(message.endswith("… [truncated]"))
        message = self.error("raise ValueError('x')", maxValueBytes=10)
        self.assertEqual(message, "… [trunc")  # the marker itself, cut on a code-point boundary

    def test_rendering_failure(self):
        message = self.error("""
            class Odd(Exception):
                def __str__(self):
                    raise RuntimeError("no")
            raise Odd()
        """)
        self.assertEqual(message, "Odd: <diagnostic rendering failed>")

    def test_syntax_error(self):
        message = self.error("x = (")
        self.assertEqual(message, '  File "<model>", line 1\n    x = (\n        ^\nSyntaxError: \'(\' was never closed')
        message = self.error("yield 1")
        self.assertIn("SyntaxError: 'yield' outside function", message)

    def test_system_exit_and_keyboard_interrupt(self):
        self.assertTrue(self.error("import sys\nsys.exit(3)").endswith("SystemExit: 3"))
        self.assertTrue(self.error("raise KeyboardInterrupt").endswith("KeyboardInterrupt"))
        self.assertTrue(self.error("import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nimport time\ntime.sleep(5)").endswith("KeyboardInterrupt"))

    def test_recursion(self):
        message = self.error("def r(n):\n    return r(n + 1)\nr(0)")
        self.assertIn("[Previous line repeated", message)
        self.assertTrue(message.endswith("RecursionError: maximum recursion depth exceeded"))

    def test_memory_bomb(self):
        for program in ("x = bytearray(10**9)", "l = []\nwhile True:\n    l.append(' ' * 10**6)",
                        "l = []\nwhile True:\n    l.append([0] * 1000)"):
            with self.subTest(program=program):
                message = self.error(program, addressSpaceBytes=256 << 20)
                self.assertTrue(message.endswith("MemoryError"), message)

    @unittest.skipIf(sys.version_info < (3, 11), "ExceptionGroup is new in 3.11")
    def test_exception_group(self):
        message = self.error("raise ExceptionGroup('many', [ValueError(1), TypeError(2)])")
        self.assertIn("ExceptionGroup: many (2 sub-exceptions)", message)
        self.assertIn("ValueError: 1", message)
        self.assertIn("TypeError: 2", message)


class Logs(unittest.TestCase):
    def test_lines(self):
        r = run("""
            import sys
            print("hello", "world")
            print("two\\nlines")
            sys.stdout.write("part")
            sys.stdout.flush()
            sys.stdout.write(" rest\\n")
            print("to stderr", file=sys.stderr)
            sys.stderr.write("é\\ud800\\n")
            sys.stdout.buffer.write("ü\\n".encode())
            print("tail", end="")
            return 1
        """)
        self.assertEqual(r.logs, [
            {"type": "log", "text": "hello world"},
            {"type": "log", "text": "two"},
            {"type": "log", "text": "lines"},
            {"type": "log", "text": "part", "open": True},
            {"type": "log", "text": " rest"},
            {"type": "log", "text": "to stderr"},
            {"type": "log", "text": "é\ufffd"},
            {"type": "log", "text": "ü"},
            {"type": "log", "text": "tail"},  # the last partial line closes at completion
        ])
        self.assertEqual(r.frames[-1], {"type": "done", "value": 1})

    def test_open_piece_closed_at_completion(self):
        r = run("import sys\nprint('a', end='', flush=True)\nreturn 2")
        self.assertEqual(r.logs, [{"type": "log", "text": "a", "open": True}, {"type": "log", "text": ""}])

    def test_ledger(self):
        # budget maxLogBytes - 1 = 19; "abc" costs len('"abc"') + 1 = 6: three fit, the fourth not
        r = run("for _ in range(10):\n    print('abc')\nreturn 1", maxLogBytes=20)
        self.assertEqual(r.logs, [{"type": "log", "text": "abc"}] * 3 + [{"type": "log", "text": "", "truncated": True}])
        self.assertEqual(r.done, {"type": "done", "value": 1})
        # 4 lines of "abc" fit exactly in maxLogBytes 25
        r = run("for _ in range(4):\n    print('abc')\nreturn 1", maxLogBytes=25)
        self.assertEqual(r.logs, [{"type": "log", "text": "abc"}] * 4)
        # an escape costs its escaped size: "\n"-free tab costs 2
        r = run("print('\\t')\nprint('\\t')", maxLogBytes=11)  # each 2 + 2 + 1 = 5: two fit in 10
        self.assertEqual(r.logs, [{"type": "log", "text": "\t"}] * 2)
        r = run("print('\\t')\nprint('\\t')", maxLogBytes=10)
        self.assertEqual(r.logs, [{"type": "log", "text": "\t"}, {"type": "log", "text": "", "truncated": True}])

    def test_ledger_bills_open_pieces_as_one_entry(self):
        # "ab" in two pieces costs like one entry: '"ab"' + 1 = 5
        r = run("import sys\nsys.stdout.write('a'); sys.stdout.flush(); sys.stdout.write('b\\n')\nprint('c')", maxLogBytes=10)
        self.assertEqual(r.logs, [{"type": "log", "text": "a", "open": True}, {"type": "log", "text": "b"},
                                  {"type": "log", "text": "c"}])

    def test_long_unterminated_line_truncates_early(self):
        r = run("import sys\nfor _ in range(100_000):\n    sys.stdout.write('x' * 1000)\nreturn 1", maxLogBytes=1000)
        self.assertEqual(r.logs, [{"type": "log", "text": "", "truncated": True}])
        self.assertEqual(r.done, {"type": "done", "value": 1})

    def test_nothing_after_done(self):
        r = run("""
            import threading, time
            def chatter():
                while True:
                    print("tick")
            threading.Thread(target=chatter, daemon=True).start()
            time.sleep(0.05)
            return 1
        """)
        self.assertEqual(r.done, {"type": "done", "value": 1})
        self.assertEqual(r.frames[-1], r.done)
        self.assertEqual(r.after_done, [])
        self.assertEqual(r.returncode, 0)

    def test_raw_fds_left_to_the_host(self):
        r = run("""
            import os, sys
            os.write(1, b"raw out\\n")
            os.write(2, b"raw err\\n")
            print("via __stdout__", file=sys.__stdout__)
            return 1
        """)
        self.assertEqual(r.stdout, b"raw out\nvia __stdout__\n")
        self.assertEqual(r.stderr, b"raw err\n")
        self.assertEqual(r.logs, [])

    def test_marker_vocabulary(self):
        self.assertEqual(protocol.log_truncation_marker(65536), "[kiln] log capture truncated at 65536 bytes")


class Bindings(unittest.TestCase):
    def test_call_ok_and_rejected(self):
        r = run("""
            a = await tools.search({"q": "x"})
            b = await tools["search"]([1, 2.5])
            try:
                await tools.fail("boom")
            except ToolError as e:
                c = [type(e).__name__, str(e), e.member, isinstance(e, Exception)]
            try:
                await db.get({"reject": "no such row"})
            except RuntimeError as e:
                d = [type(e).__name__, str(e)]
            return [a, b, c, d]
        """)
        self.assertEqual(r.calls, [
            {"type": "call", "id": 0, "global": "tools", "name": "search", "args": {"q": "x"}},
            {"type": "call", "id": 1, "global": "tools", "name": "search", "args": [1, 2.5]},
            {"type": "call", "id": 2, "global": "tools", "name": "fail", "args": "boom"},
            {"type": "call", "id": 3, "global": "db", "name": "get", "args": {"reject": "no such row"}},
        ])
        self.assertEqual(r.done["value"], [{"echo": {"q": "x"}}, {"echo": [1, 2.5]},
                                           ["ToolError", "it failed", "fail", True], ["RuntimeError", "no such row"]])

    def test_rejection_traceback(self):
        r = run("await tools.fail(1)")
        self.assertEqual(r.done["error"]["message"],
                         'Traceback (most recent call last):\n  File "<model>", line 1, in <module>\n'
                         "    await tools.fail(1)\nToolError: it failed")

    def test_undeclared_names(self):
        r = run("""
            out = []
            try:
                tools.nope
            except AttributeError as e:
                out.append(str(e))
            try:
                tools["nope"]
            except KeyError as e:
                out.append(repr(e))
            out.append(sorted(dir(tools)))
            out.append("search" in tools)
            return out
        """)
        self.assertEqual(r.done["value"], ["tools has no binding 'nope'", "KeyError('nope')", ["fail", "search"], True])
        self.assertEqual(r.calls, [])

    def test_args_not_lossless_claim_no_id(self):
        r = run("""
            try:
                await tools.search(float("nan"))
            except TypeError as e:
                m = str(e)
            await tools.search(None)
            await tools.search()
            return m
        """)
        self.assertEqual(r.done["value"], "tools.search: the argument is not lossless JSON: NaN at $")
        self.assertEqual([c["id"] for c in r.calls], [0, 1])
        self.assertEqual(r.calls[1]["args"], None)
        self.assertIn(b'"args":null', r.raw[-2])

    def test_gather_1025(self):
        r = run("""
            import asyncio
            out = await asyncio.gather(*(tools.search(i) for i in range(1025)))
            return [o["echo"] for o in out] == list(range(1025))
        """)
        self.assertEqual(r.done, {"type": "done", "value": True})
        self.assertEqual([c["id"] for c in r.calls], list(range(1025)))

    def test_big_frames_both_ways(self):
        # This host is single-threaded: it blocks writing a reply while the
        # child writes calls. The child keeps reading while it waits to write,
        # so neither side stalls.
        r = run("""
            import asyncio
            out = await asyncio.gather(*(tools.search("x" * 20_000 + str(i)) for i in range(300)))
            return [len(o["echo"]) for o in out[:3]]
        """, maxLogBytes=1 << 20)
        self.assertEqual(r.done, {"type": "done", "value": [20_001, 20_001, 20_001]})
        self.assertEqual(len(r.calls), 300)

    def test_replies_out_of_order_and_unknown_ids(self):
        pending = []

        def answer(call):
            pending.append(call)
            if len(pending) < 3:
                return None
            # answer the three in reverse, with junk around them
            host_frames = [{"type": "reply", "id": 99, "ok": True, "value": "junk"}]
            for c in reversed(pending):
                host_frames.append({"type": "reply", "id": c["id"], "ok": True, "value": c["args"] * 10})
            pending.clear()
            return host_frames

        host = H.Host(answer=None)
        try:
            host.boot()
            host.send({"type": "run", "program": textwrap.dedent("""
                import asyncio
                return await asyncio.gather(tools.search(1), tools.search(2), tools.search(3))
            """)})
            while True:
                f = host.read()
                if f["type"] == "call":
                    out = answer(f)
                    if out:
                        host.send_raw(b"not json\n\n")
                        for x in out:
                            host.send(x)
                if f["type"] == "done":
                    break
            r = host.finish()
        finally:
            host.kill()
        self.assertEqual(r.done["value"], [10, 20, 30])

    def test_deep_reply(self):
        host = H.Host(answer=None)
        try:
            host.boot()
            host.send({"type": "run", "program": textwrap.dedent("""
                v = await tools.search(1)
                d = 0
                while type(v) is list:
                    v = v[0]
                    d += 1
                return [d, v]
            """)})
            call = host.read()
            self.assertEqual(call["type"], "call")
            host.send_raw(b'{"type":"reply","id":0,"ok":true,"value":' + b"[" * 12_000 + b'"leaf"' + b"]" * 12_000 + b"}\n")
            while host.read()["type"] != "done":
                pass
            r = host.finish()
        finally:
            host.kill()
        self.assertEqual(r.done["value"], [12_000, "leaf"])

    def test_call_from_another_thread(self):
        r = run("""
            import asyncio, threading
            box = []
            def worker():
                box.append(asyncio.run(tools.search("from a thread")))
            t = threading.Thread(target=worker)
            t.start()
            while t.is_alive():
                await asyncio.sleep(0.01)
            return box
        """)
        self.assertEqual(r.done["value"], [{"echo": "from a thread"}])

    def test_reply_value_types(self):
        def answer(call):
            return {"type": "reply", "id": call["id"], "ok": True, "value": [1, 1.5, 2**60, "é", None, {"a": [True]}]}

        r = run("v = await tools.search(0)\nreturn [v, [type(x).__name__ for x in v]]", answer=answer)
        self.assertEqual(r.done["value"], [[1, 1.5, 2**60, "é", None, {"a": [True]}],
                                           ["int", "float", "int", "str", "NoneType", "dict"]])


class Semantics(unittest.TestCase):
    def test_module_like_top_level(self):
        r = run("""
            \"\"\"A docstring.\"\"\"
            from __future__ import annotations
            from math import *
            count: int = 0
            hint: str
            def bump():
                global count
                count += 1
            bump(); bump()
            squares = [i * i for i in range(3)]
            if (n := len(squares)) > 2:
                pass
            class Point:
                x: int = 1
                def norm(self) -> float:
                    return sqrt(self.x)
            import json as j
            for k in range(2):
                pass
            try:
                raise ValueError
            except ValueError as err:
                caught = True
            match {"a": 1}:
                case {"a": val, **rest}:
                    pass
            return [count, squares, n, Point().norm(), j.dumps(1), k, caught, val, __name__,
                    sorted(x for x in ("count", "n", "k", "caught", "val", "rest", "Point", "bump", "j") if x in globals()),
                    floor(2.5)]
        """)
        self.assertEqual(r.done["value"], [2, [0, 1, 4], 3, 1, "1", 1, True, 1, "__main__",
                                           ["Point", "bump", "caught", "count", "j", "k", "n", "rest", "val"], 2])

    def test_stdin_reads_eof(self):
        r = run("""
            import sys
            try:
                input()
            except EOFError:
                a = "eof"
            return [a, sys.stdin.read()]
        """)
        self.assertEqual(r.done["value"], ["eof", ""])

    def test_environment(self):
        r = run("import os\nreturn sorted(os.environ)")
        self.assertEqual(r.done["value"], ["HOME", "LANG", "PATH", "TMPDIR"])

    def test_limits_applied(self):
        program = """
            import resource as r
            return [list(r.getrlimit(r.RLIMIT_CORE)), list(r.getrlimit(r.RLIMIT_CPU)), list(r.getrlimit(r.RLIMIT_AS))]
        """
        r = run(program, cpuSeconds=7, addressSpaceBytes=512 << 20)
        self.assertEqual(r.done["value"], [[0, 0], [7, 8], [512 << 20, 512 << 20]])

        def inherited():  # stricter than the request: the inherited limits win
            resource.setrlimit(resource.RLIMIT_CPU, (10, 10))
            resource.setrlimit(resource.RLIMIT_AS, (600 << 20, 700 << 20))

        r = run(program, cpuSeconds=60, addressSpaceBytes=1 << 30, preexec=inherited)
        self.assertEqual(r.done["value"], [[0, 0], [9, 10], [600 << 20, 700 << 20]])

        def soft_only():  # a lower inherited soft limit keeps the one-second grace
            resource.setrlimit(resource.RLIMIT_CPU, (5, resource.RLIM_INFINITY))

        r = run(program, cpuSeconds=60, preexec=soft_only)
        self.assertEqual(r.done["value"][1], [5, 6])

    def test_bootstrap_errors(self):
        r = H.run("return 1", cpuSeconds="x")
        self.assertEqual(r.frames, [{"type": "done", "error": {
            "kind": "exception", "message": "bootstrap: invalid boot frame: cpuSeconds must be an integer >= 1"}}])
        self.assertEqual(r.returncode, 0)
        r = H.run("return 1", namespaces=[{"global": "t", "names": ["x"], "errorClass": {"name": "E", "memberNameProperty": "args"}}])
        self.assertEqual(r.done["error"]["message"], "bootstrap: invalid boot frame: memberNameProperty 'args' is not usable")
        r = H.run("return 1", addressSpaceBytes=1 << 20)
        self.assertEqual(r.done["error"]["kind"], "exception")
        self.assertTrue(r.done["error"]["message"].startswith("bootstrap: applying resource limits failed"), r.done)

    def test_run_only_once(self):
        host = H.Host()
        try:
            host.boot()
            host.send({"type": "run", "program": "import asyncio\nawait asyncio.sleep(0.2)\nreturn 'first'"})
            host.send({"type": "run", "program": "return 'second'"})
            host.send({"type": "boot", "cpuSeconds": 1})
            while host.read()["type"] != "done":
                pass
            r = host.finish()
        finally:
            host.kill()
        self.assertEqual(r.done["value"], "first")


class Hardening(unittest.TestCase):
    def test_rebinding_cannot_stop_done(self):
        programs = [
            "print = None\n__builtins__ = None\nreturn 1",
            "import builtins\nd = vars(builtins)\nfor k in list(d):\n    d[k] = None\nreturn 1",
            "import sys\nfor k in list(sys.modules):\n    del sys.modules[k]\nreturn 1",
            "import sys, os\ndel sys.modules['os']\nos.write = None\nos._exit = None\nsys.stdout = None\nsys.stderr = None\nreturn 1",
            "import json, asyncio, signal, resource\njson.dumps = json.loads = None\nasyncio.get_running_loop = None\n"
            "signal.signal = None\nresource.getrusage = None\nreturn 1",
            "import sys\nsys.setrecursionlimit(50)\nsys.setprofile(lambda *a: 1/0)\nsys.settrace(lambda *a: 1/0)\nreturn 'x'",
            "import builtins\nbuiltins.len = builtins.isinstance = builtins.type = None\nreturn [1, 'x', {'a': 2.5}]",
        ]
        for program in programs:
            with self.subTest(program=program):
                r = run(program)
                self.assertIsNotNone(r.done, (r.frames, r.stderr))
                self.assertEqual(r.frames[-1], r.done)
                self.assertEqual(r.returncode, 0)
                if "return 1" in program:
                    self.assertEqual(r.done, {"type": "done", "value": 1})
        r = run("import builtins\nbuiltins.len = builtins.isinstance = builtins.type = None\nreturn [1, 'x', {'a': 2.5}]")
        self.assertEqual(r.done, {"type": "done", "value": [1, "x", {"a": 2.5}]})

    def test_broken_builtins_with_an_exception(self):
        r = run("import builtins\nbuiltins.str = builtins.repr = builtins.len = None\nraise ValueError('still rendered')")
        self.assertTrue(r.done["error"]["message"].endswith("ValueError: still rendered"), r.done)

    def test_a_fork_does_not_send_done(self):
        r = run("""
            import os
            pid = os.fork()
            if pid == 0:
                print("in the fork")
                return "fork"
            os.waitpid(pid, 0)
            return "parent"
        """)
        self.assertEqual([f for f in r.frames if f["type"] == "done"], [{"type": "done", "value": "parent"}])
        self.assertEqual(r.returncode, 0)

    def test_program_handlers_do_not_run_after_completion(self):
        r = run("""
            import signal
            signal.signal(signal.SIGALRM, lambda *a: print("late"))
            signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
            return 1
        """)
        self.assertEqual(r.frames[-1], {"type": "done", "value": 1})
        self.assertEqual(r.returncode, 0)


class CPU(unittest.TestCase):
    def test_busy_loop_dies_by_sigxcpu(self):
        r = run("while True:\n    pass", cpuSeconds=1)
        self.assertIsNone(r.done)
        self.assertEqual(r.returncode, -signal.SIGXCPU, r.frames)

    def test_ignored_sigxcpu_dies_by_sigkill_at_the_hard_limit(self):
        r = run("import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass", cpuSeconds=1)
        self.assertIsNone(r.done)
        self.assertEqual(r.returncode, -signal.SIGKILL, r.frames)


if __name__ == "__main__":
    unittest.main()
