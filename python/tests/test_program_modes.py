"""kiln.program's two modes: a program runs on an asyncio event loop when it may
need one, else without (see _needs_loop in kiln/program.py).

The choice is checked on its own, then end to end: the same programs run in
both modes must send the same frames. A mention of asyncio anywhere in the
source, a comment included, puts a program on the loop, so each program runs
as written (without a loop) and with LOOP appended (on one).
"""

import signal
import textwrap
import time
import unittest

from kiln import program as kiln_program
from kiln import protocol
from tests import test_program_host as H

LOOP = "\n# asyncio"  # appended: the same program, on the event loop

MODES = (("direct", ""), ("loop", LOOP))


def run(program, suffix="", **kw):
    return H.run(textwrap.dedent(program) + suffix, **kw)


def needs_loop(source):
    return kiln_program._compile(textwrap.dedent(source))[2]


class Choice(unittest.TestCase):
    def test_without_a_loop(self):
        for source in [
            "return 1",
            "",
            "x = await tools.search(1)\nreturn x",
            "import json, math, re\nfrom collections import Counter, abc\nreturn 1",
            "import os.path\nimport xml.etree.ElementTree as ET\nfrom urllib.parse import quote\nfrom json import decoder",
            "from __future__ import annotations\nfrom math import *\nreturn 1",
            "def execute():\n    return 'evaluate'\nhelper = execute()\nreturn helper",
            "import types\n@types.coroutine\ndef tick():\n    yield\nawait tick()",
            "class Aw:\n    def __await__(self):\n        yield 'x'\nawait Aw()",
        ]:
            with self.subTest(source=source):
                self.assertFalse(needs_loop(source))

    def test_on_a_loop(self):
        for source in [
            "import asyncio",
            "import asyncio.tasks",
            "from asyncio import gather",
            "x = 'asyncio'",  # a string: exec or sys.modules could use it
            "return 1  # no asyncio here",
            "import threading",
            "import _thread",
            "from concurrent.futures import ThreadPoolExecutor",
            "import multiprocessing",
            "import numpy",  # not known to do without: it might use asyncio
            "import requests\nreturn 1",
            "def f():\n    import aiohttp\n    return aiohttp",  # an import anywhere counts
            "class C:\n    def m(self):\n        from trio import sleep",
            "import logging",
            "import logging.config",
            "from xml import dom",
            "from . import sibling",
            "import importlib",
            "import json\nm = __import__('js' + 'on')",
            "getattr(__builtins__, '__import__')",
            "exec('x = 1')",
            "return eval('1 + 1')",
            "help(len)",
            "breakpoint()",
            "import builtins\nreturn builtins.eval('1')",
            "f = exec\nf('pass')",
            "x = 1\nimport_module = None",
        ]:
            with self.subTest(source=source):
                self.assertTrue(needs_loop(source))

    def test_no_loop_modules_are_standard_library(self):
        import sys
        stdlib = getattr(sys, "stdlib_module_names", None)
        if stdlib is None:
            self.skipTest("sys.stdlib_module_names is new in 3.10")
        for name in kiln_program._NO_LOOP_MODULES:
            self.assertIn(name.split(".")[0], stdlib, name)
        for name in ("asyncio", "threading", "_thread", "concurrent", "multiprocessing", "importlib",
                     "runpy", "pkgutil", "pickle", "logging", "unittest", "pdb", "code", "timeit"):
            self.assertFalse(kiln_program._no_loop_module(name), name)

    def test_protocol_fd_agrees(self):
        self.assertEqual(kiln_program.PROTOCOL_FD, protocol.PROTOCOL_FD)


class Namespaces(unittest.TestCase):
    """The proxy globals: members as class attributes, unless a binding is
    named like a special attribute."""

    def test_attributes(self):
        async def fn(args=None):
            return args

        for names in (["search", "fail"], ["search", "__call__", "__init__"]):
            with self.subTest(names=names):
                ns = kiln_program._make_namespace("tools", [(n, fn) for n in names])
                self.assertIs(ns.search, fn)
                self.assertIs(ns["search"], fn)
                self.assertEqual(repr(ns), "<bindings tools: %s>" % ", ".join(names))
                self.assertEqual(dir(ns), sorted(names))
                self.assertEqual(list(ns), names)
                self.assertEqual(len(ns), len(names))
                self.assertIn("search", ns)
                self.assertNotIn("nope", ns)
                with self.assertRaisesRegex(AttributeError, "^tools has no binding 'nope'$"):
                    ns.nope
                with self.assertRaises(KeyError):
                    ns["nope"]
                with self.assertRaisesRegex(AttributeError, "no attribute '__dict__'"):
                    ns.__dict__
                with self.assertRaisesRegex(AttributeError, "^tools is read-only$"):
                    ns.search = None
                with self.assertRaisesRegex(AttributeError, "^tools is read-only$"):
                    del ns.search
                self.assertEqual(type(ns).__name__, "Bindings")
                self.assertEqual(ns.__init__ is fn, "__init__" in names)


class BothModes(unittest.TestCase):
    """The same program in both modes: the same frames."""

    def same(self, program, check=None, compare=True, **kw):
        """Run program in both modes; assert that the frames agree (with
        compare, else just done); return the results."""
        results = {}
        for mode, suffix in MODES:
            with self.subTest(mode=mode):
                r = run(program, suffix, **kw)
                self.assertEqual(r.returncode, 0, (mode, r.frames, r.stderr))
                self.assertEqual(r.after_done, [], mode)
                self.assertEqual(r.frames[-1], r.done, mode)
                if check is not None:
                    check(r)
                results[mode] = r
        if len(results) == 2:
            if compare:
                self.assertEqual(results["direct"].raw, results["loop"].raw)
            else:
                self.assertEqual(results["direct"].done_raw, results["loop"].done_raw)
        return results

    def test_the_mode_is_the_one_chosen(self):
        for mode, suffix in MODES:
            with self.subTest(mode=mode):
                r = run("import sys\nreturn ['async' + 'io' in sys.modules, await tools.search(1)]", suffix)
                self.assertEqual(r.done["value"], [mode == "loop", {"echo": 1}])

    def test_binding_calls(self):
        results = self.same("""
            a = await tools.search({"q": "x"})
            b = await tools["search"]([1, 2.5, "é", None])
            try:
                await tools.fail("boom")
            except ToolError as e:
                c = [type(e).__name__, str(e), e.member, isinstance(e, Exception)]
            try:
                await db.get({"reject": "no such row"})
            except RuntimeError as e:
                d = [type(e).__name__, str(e)]
            try:
                await tools.search(float("nan"))
            except TypeError as e:
                t = str(e)
            return [a, b, c, d, t]
        """)
        r = results["direct"]
        self.assertEqual([(c["id"], c["name"]) for c in r.calls], [(0, "search"), (1, "search"), (2, "fail"), (3, "get")])
        self.assertEqual(r.done["value"], [
            {"echo": {"q": "x"}}, {"echo": [1, 2.5, "é", None]},
            ["ToolError", "it failed", "fail", True], ["RuntimeError", "no such row"],
            "tools.search: the argument is not lossless JSON: NaN at $",
        ])

    def test_rejected_call_raises_the_error_class(self):
        results = self.same("x = 1\nawait tools.fail(x)")
        self.assertEqual(results["direct"].done["error"]["message"],
                         'Traceback (most recent call last):\n  File "<model>", line 2, in <module>\n'
                         "    await tools.fail(x)\nToolError: it failed")
        results = self.same("async def get():\n    return await db.get({'reject': 'gone'})\nawait get()")
        self.assertEqual(results["direct"].done["error"]["message"],
                         'Traceback (most recent call last):\n  File "<model>", line 3, in <module>\n'
                         "    await get()\n"
                         '  File "<model>", line 2, in get\n'
                         "    return await db.get({'reject': 'gone'})\nRuntimeError: gone")

    def test_many_calls_in_turn(self):
        results = self.same("t = 0\nfor i in range(300):\n    t += (await tools.search(i))['echo']\nreturn t")
        self.assertEqual(results["direct"].done["value"], sum(range(300)))

    def test_replies_with_junk_between(self):
        def answer(call):
            # junk, a reply to an id not in flight, malformed replies to the
            # call, the run frame again, then the reply, with a float id
            return [b"not json\n", b"\n", b'{"type":"reply","id":99,"ok":true,"value":0}\n',
                    b'{"type":"reply","id":%d,{\n' % call["id"], b'{"type":"reply","id":%d,"ok":"\\x"}\n' % call["id"],
                    b'{"type":"reply","id":%d,"ok":true,"value":"\xff"}\n' % call["id"],
                    b'{"type":"run","program":"return 2"}\n', b"[1]\n",
                    b'{"type":"reply","id":%d.0,"ok":true,"value":%s}\n' % (call["id"], str(call["args"]).encode())]

        for mode, suffix in MODES:
            with self.subTest(mode=mode):
                host = H.Host(answer=None)
                try:
                    host.boot()
                    host.send({"type": "run", "program": "return [await tools.search(i) for i in range(3)]" + suffix})
                    while True:
                        f = host.read()
                        if f["type"] == "call":
                            host.send_raw(b"".join(answer(f)))
                        if f["type"] == "done":
                            break
                    r = host.finish()
                finally:
                    host.kill()
                self.assertEqual(r.done, {"type": "done", "value": [0, 1, 2]})

    def test_replies_in_pieces(self):
        # A reply split across writes, the next frame starting in its last piece.
        for mode, suffix in MODES:
            with self.subTest(mode=mode):
                host = H.Host(answer=None)
                try:
                    host.boot()
                    host.send({"type": "run", "program": "return [len(await tools.search(i)) for i in range(3)]" + suffix})
                    while True:
                        f = host.read()
                        if f["type"] == "call":
                            line = b'{"type":"reply","id":%d,"ok":true,"value":"%s"}\n' % (f["id"], b"v" * 100_000)
                            host.send_raw(line[:7])
                            time.sleep(0.01)
                            host.send_raw(line[7:50_000])
                            time.sleep(0.01)
                            if f["id"] == 2:  # the last: the child may be gone once it has it
                                host.send_raw(line[50_000:])
                                continue
                            host.send_raw(line[50_000:] + b'{"type":"reply","id":77,"ok":true,"value":0}\n{"type"')
                            time.sleep(0.01)
                            host.send_raw(b':"reply","id":88,"ok":true,"value":0}\n')
                        if f["type"] == "done":
                            break
                    r = host.finish()
                finally:
                    host.kill()
                self.assertEqual(r.done, {"type": "done", "value": [100_000] * 3})

    def test_big_frames_in_turn(self):
        results = self.same("""
            n = 0
            for i in range(20):
                n += len((await tools.search("x" * 300_000 + str(i)))["echo"])
            return n
        """)
        self.assertEqual(results["direct"].done["value"], sum(300_000 + len(str(i)) for i in range(20)))

    def test_logs_values_and_errors(self):
        self.same("""
            import sys
            print("hello", "world")
            sys.stdout.write("part")
            sys.stdout.flush()
            sys.stdout.write(" rest\\n")
            print("to stderr", file=sys.stderr)
            print("tail", end="")
            return {"b": [1.0, 1e21, 2**60], "a": "é\\ud800", "10": None}
        """)
        self.same("for _ in range(10):\n    print('abc')\nreturn 1", maxLogBytes=20)
        self.same("return [float('nan')]")
        self.same("return 'x' * 99", maxValueBytes=100)
        results = self.same("import json\ndef parse(text):\n    return json.loads(text)\nparse('{')")
        self.assertTrue(results["direct"].done["error"]["message"].startswith(
            'Traceback (most recent call last):\n  File "<model>", line 4, in <module>\n    parse(\'{\')\n'))
        self.same("x = (")
        self.same("import sys\nsys.exit(3)")

    def test_rebinding_cannot_stop_done(self):
        for program in [
            "print = None\n__builtins__ = None\nreturn 1",
            "import builtins\nd = vars(builtins)\nfor k in list(d):\n    d[k] = None\nreturn 1",
            "import sys\nfor k in list(sys.modules):\n    del sys.modules[k]\nreturn 1",
            "import sys, os\ndel sys.modules['os']\nos.write = None\nos._exit = None\nsys.stdout = None\nsys.stderr = None\nreturn 1",
            "import json, signal, resource\njson.dumps = json.loads = None\nsignal.signal = None\nresource.getrusage = None\nreturn 1",
            "import builtins\nbuiltins.len = builtins.isinstance = builtins.type = None\nbuiltins.StopIteration = None\nreturn 1",
            "import sys\nsys.setrecursionlimit(50)\nsys.setprofile(lambda *a: 1/0)\nsys.settrace(lambda *a: 1/0)\nreturn 'x'",
        ]:
            with self.subTest(program=program):
                results = self.same(program)
                if "return 1" in program:
                    self.assertEqual(results["direct"].done, {"type": "done", "value": 1})

    def test_program_handlers_do_not_run_after_completion(self):
        self.same("""
            import signal
            signal.signal(signal.SIGALRM, lambda *a: print("late"))
            signal.signal(signal.SIGUSR1, lambda *a: None)
            signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
            return 1
        """, compare=False)  # how often "late" is logged before completion varies

    def test_completion_recheck(self):
        for mode, suffix in MODES:
            with self.subTest(mode=mode):
                r = run("""
                    import signal, time
                    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
                    while time.process_time() < 1.3:
                        pass
                    return 1
                """, suffix, cpuSeconds=1)
                self.assertIsNone(r.done)
                self.assertEqual(r.returncode, -signal.SIGXCPU, r.frames)


class WithoutALoop(unittest.TestCase):
    def test_awaiting_something_foreign(self):
        # An awaitable that suspends for something other than a bare yield
        # needs an event loop: the RuntimeError comes at the await.
        program = """
            class Foreign:
                def __await__(self):
                    yield "a future of some event loop"
                    return 1
            try:
                await Foreign()
            except RuntimeError as e:
                first = str(e)
            v = await tools.search(2)
            await Foreign()
        """
        r = run(program)
        message = r.done["error"]["message"]
        self.assertEqual(message, textwrap.dedent("""\
            Traceback (most recent call last):
              File "<model>", line 11, in <module>
                await Foreign()
              File "<model>", line 4, in __await__
                yield "a future of some event loop"
            RuntimeError: the program awaited a str, which needs an event loop, and it runs without one: """)
            + "kiln runs a program on an asyncio event loop when its source mentions asyncio")
        self.assertEqual(len(r.calls), 1)
        # On the loop, asyncio refuses the same yield in its own words.
        r = run(program, LOOP)
        self.assertTrue(r.done["error"]["message"].endswith("RuntimeError: Task got bad yield: 'a future of some event loop'"),
                        r.done)

    def test_caught_and_carried_on(self):
        r = run("""
            class Foreign:
                def __await__(self):
                    try:
                        yield 42
                    except RuntimeError as e:
                        return "told: " + str(e)[:20]
            return [await Foreign(), await tools.search(1)]
        """)
        self.assertEqual(r.done["value"], ["told: the program awaited ", {"echo": 1}])

    def test_bare_yield_resumes(self):
        # asyncio.sleep(0) and a types.coroutine that yields nothing give way
        # to the loop's other tasks: without a loop there are none.
        r = run("""
            import types
            @types.coroutine
            def give_way():
                got = yield
                return got
            out = []
            for i in range(3):
                out.append(await give_way())
                out.append(await tools.search(i))
            return out
        """)
        self.assertEqual(r.done["value"], [None, {"echo": 0}, None, {"echo": 1}, None, {"echo": 2}])

    def test_fd_3_made_non_blocking(self):
        r = run("""
            import os
            os.set_blocking(3, False)
            return [await tools.search(i) for i in range(3)]
        """)
        self.assertEqual(r.done["value"], [{"echo": 0}, {"echo": 1}, {"echo": 2}])

    def test_a_signal_handler_interrupts_a_call(self):
        # A handler that raises while a call waits for its reply: the
        # exception comes out of the await; the late reply is dropped.
        def answer(call):
            if call["args"] == "slow":
                time.sleep(0.5)
            return H.default_answer(call)

        r = run("""
            import signal
            def give_up(*a):
                raise TimeoutError("too slow")
            signal.signal(signal.SIGALRM, give_up)
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            try:
                await tools.search("slow")
            except TimeoutError as e:
                caught = str(e)
            return [caught, await tools.search("fast")]
        """, answer=answer)
        self.assertEqual(r.done["value"], ["too slow", {"echo": "fast"}])
        self.assertEqual([c["id"] for c in r.calls], [0, 1])


class Warming(unittest.TestCase):
    """A child left waiting for run imports asyncio meanwhile."""

    def run_after(self, idle, program):
        host = H.Host()
        try:
            ack = host.boot()
            self.assertEqual(ack, {"type": "boot-ack"})
            time.sleep(idle)
            return host.run(textwrap.dedent(program))
        except BaseException:
            host.kill()
            raise

    def test_warmed_child_runs_both_modes(self):
        r = self.run_after(1.5, "import sys\nreturn ['asyncio' in sys.modules, await tools.search(1)]")
        self.assertEqual(r.done["value"], [True, {"echo": 1}])
        r = self.run_after(1.5, """
            import asyncio
            out = await asyncio.gather(*(tools.search(i) for i in range(50)))
            return [o["echo"] for o in out] == list(range(50))
        """)
        self.assertEqual(r.done, {"type": "done", "value": True})

    def test_calls_from_a_nested_event_loop(self):
        # A program that reaches an event loop all the same (asyncio.run, the
        # name spelt so that the source does not mention it, from a warm
        # child that has imported asyncio) still makes its calls: they wait
        # in place.
        r = self.run_after(1.5, """
            import sys
            aio = sys.modules["async" + "io"]
            async def both():
                return [await tools.search(1), await tools.search(2)]
            return aio.run(both())
        """)
        self.assertEqual(r.done["value"], [{"echo": 1}, {"echo": 2}])

    def test_run_during_warm_up(self):
        for idle in (0.45, 0.5, 0.55, 0.6, 0.7):
            with self.subTest(idle=idle):
                r = self.run_after(idle, "import asyncio\nawait asyncio.sleep(0)\nreturn await tools.search(1)")
                self.assertEqual(r.done, {"type": "done", "value": {"echo": 1}})
                r = self.run_after(idle, "return await tools.search(2)")
                self.assertEqual(r.done, {"type": "done", "value": {"echo": 2}})


if __name__ == "__main__":
    unittest.main()
