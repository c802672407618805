"""kiln.program end to end: a program that can suspend on its event loop
(binding calls, replies among junk, logs, values, what a program may rebind,
signals), one that cannot without a loop, and a pooled child warming up while
it waits for run."""

import os
import signal
import textwrap
import time
import unittest

from kiln import program_bridge, program_channel, program_compile, protocol
from tests import test_program_host as H


def run(program, **kw):
    return H.run(textwrap.dedent(program), **kw)


class Wire(unittest.TestCase):
    def test_protocol_fd_agrees(self):
        self.assertEqual(program_channel.PROTOCOL_FD, protocol.PROTOCOL_FD)


class Namespaces(unittest.TestCase):
    """The proxy globals: members as class attributes, unless a binding is
    named like a special attribute."""

    def test_attributes(self):
        async def fn(args=None):
            return args

        for names in (["search", "fail"], ["search", "__call__", "__init__"]):
            with self.subTest(names=names):
                ns = program_bridge.make_namespace("tools", [(n, fn) for n in names])
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


class Runs(unittest.TestCase):
    """Programs that await, end to end, on their event loop."""

    def same(self, program, check=None, **kw):
        """Run program; assert that it ended well, with done last; return the
        results, by mode, as run gives them."""
        r = run(program, **kw)
        self.assertEqual(r.returncode, 0, (r.frames, r.stderr))
        self.assertEqual(r.after_done, [])
        self.assertEqual(r.frames[-1], r.done)
        if check is not None:
            check(r)
        return {"loop": r}

    def test_a_program_that_awaits_runs_on_a_loop(self):
        # However it names asyncio: what counts is the compiled await.
        for program in ("import sys\nreturn ['async' + 'io' in sys.modules, await tools.search(1)]",
                        "import sys\nreturn [sys.modules['async' + 'io'].get_running_loop() is not None, await tools.search(1)]"):
            with self.subTest(program=program):
                self.assertEqual(run(program).done["value"], [True, {"echo": 1}])

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
        r = results["loop"]
        self.assertEqual([(c["id"], c["name"]) for c in r.calls], [(0, "search"), (1, "search"), (2, "fail"), (3, "get")])
        self.assertEqual(r.done["value"], [
            {"echo": {"q": "x"}}, {"echo": [1, 2.5, "é", None]},
            ["ToolError", "it failed", "fail", True], ["RuntimeError", "no such row"],
            "tools.search: the argument is not lossless JSON: NaN at $",
        ])

    def test_rejected_call_raises_the_error_class(self):
        results = self.same("x = 1\nawait tools.fail(x)")
        self.assertEqual(results["loop"].done["error"]["message"],
                         'Traceback (most recent call last):\n  File "<model>", line 2, in <module>\n'
                         "    await tools.fail(x)\nToolError: it failed")
        results = self.same("async def get():\n    return await db.get({'reject': 'gone'})\nawait get()")
        self.assertEqual(results["loop"].done["error"]["message"],
                         'Traceback (most recent call last):\n  File "<model>", line 3, in <module>\n'
                         "    await get()\n"
                         '  File "<model>", line 2, in get\n'
                         "    return await db.get({'reject': 'gone'})\nRuntimeError: gone")

    def test_many_calls_in_turn(self):
        results = self.same("t = 0\nfor i in range(300):\n    t += (await tools.search(i))['echo']\nreturn t")
        self.assertEqual(results["loop"].done["value"], sum(range(300)))

    def test_replies_with_junk_between(self):
        def answer(call):
            # junk, a reply to an id not in flight, malformed replies to the
            # call, the run frame again, then the reply, with a float id
            return [b"not json\n", b"\n", b'{"type":"reply","id":99,"ok":true,"value":0}\n',
                    b'{"type":"reply","id":%d,{\n' % call["id"], b'{"type":"reply","id":%d,"ok":"\\x"}\n' % call["id"],
                    b'{"type":"reply","id":%d,"ok":true,"value":"\xff"}\n' % call["id"],
                    b'{"type":"run","program":"return 2"}\n', b"[1]\n",
                    b'{"type":"reply","id":%d.0,"ok":true,"value":%s}\n' % (call["id"], str(call["args"]).encode())]

        host = H.Host(answer=None)
        try:
            host.boot()
            host.send({"type": "run", "program": "return [await tools.search(i) for i in range(3)]"})
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
        host = H.Host(answer=None)
        try:
            host.boot()
            host.send({"type": "run", "program": "return [len(await tools.search(i)) for i in range(3)]"})
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
        self.assertEqual(results["loop"].done["value"], sum(300_000 + len(str(i)) for i in range(20)))

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
        self.assertTrue(results["loop"].done["error"]["message"].startswith(
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
                    self.assertEqual(results["loop"].done, {"type": "done", "value": 1})

    def test_program_handlers_do_not_run_after_completion(self):
        self.same("""
            import signal
            signal.signal(signal.SIGALRM, lambda *a: print("late"))
            signal.signal(signal.SIGUSR1, lambda *a: None)
            signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
            return 1
        """)

    def test_completion_recheck(self):
        r = run("""
            import signal, time
            signal.signal(signal.SIGXCPU, signal.SIG_IGN)
            while time.process_time() < 1.3:
                pass
            return 1
        """, cpuSeconds=1)
        self.assertIsNone(r.done)
        self.assertEqual(r.returncode, -signal.SIGXCPU, r.frames)


class Inline(unittest.TestCase):
    """A program whose compiled body has no instruction to suspend at runs to
    its end without an event loop, and without importing asyncio."""

    SUSPENDS = {
        "return 1": False,
        "": False,
        "x = [i * i for i in range(3)]\nreturn {k: k for k in x}": False,
        "def gen():\n    yield 1\nreturn list(gen())": False,
        "async def later():\n    await tools.search(1)\nreturn 1": False,
        "return (await tools.search(x) for x in [1])": False,  # an async generator, made but not run
        "lambda: 1": False,
        "await tools.search(1)": True,
        "x = 1 if y else await tools.search(1)": True,
        "return [await tools.search(i) for i in range(2)]": True,
        "return [x async for x in agen()]": True,
        "async for x in agen():\n    pass": True,
        "async with ctx():\n    pass": True,
        "@deco(await tools.search(1))\ndef f():\n    pass": True,
        "def f(x=await tools.search(1)):\n    pass": True,
    }

    def test_suspends_is_read_from_the_compiled_body(self):
        for source, want in self.SUSPENDS.items():
            with self.subTest(source=source):
                self.assertIs(program_compile.compile_program(source)[2], want)

    def test_no_asyncio_and_no_loop(self):
        r = run("""
            import sys
            try:
                sys.modules["async" + "io"].get_running_loop()
                loop = "running"
            except KeyError:
                loop = "asyncio not imported"
            return loop
        """)
        self.assertEqual(r.done, {"type": "done", "value": "asyncio not imported"})

    def test_the_program_may_run_its_own_loop(self):
        r = run("""
            import asyncio
            async def main():
                await asyncio.sleep(0)
                return 5
            return [asyncio.run(main()), asyncio.run(main())]
        """)
        self.assertEqual(r.done, {"type": "done", "value": [5, 5]})

    def test_a_binding_call_is_refused_in_words(self):
        r = run("""
            import asyncio
            try:
                asyncio.run(tools.search(1))
            except RuntimeError as e:
                return str(e)
        """)
        self.assertEqual(r.done["value"], "tools.search: a binding call needs a program that awaits; this one "
                                          "has no await of its own, so it runs without an event loop")
        self.assertEqual(r.calls, [])

    def test_exceptions_and_logs(self):
        r = run("""
            print("before")
            def f():
                raise StopIteration(5)
            f()
        """)
        self.assertEqual(r.log_texts(), ["before"])
        # As on a loop: a StopIteration out of a coroutine is a RuntimeError, not its return.
        self.assertTrue(r.done["error"]["message"].endswith(
            "StopIteration: 5\n\nThe above exception was the direct cause of the following exception:\n\n"
            "RuntimeError: coroutine raised StopIteration"), r.done)
        r = run("raise SystemExit(3)")
        self.assertTrue(r.done["error"]["message"].endswith("SystemExit: 3"), r.done)


class Awaiting(unittest.TestCase):
    def test_awaiting_something_foreign(self):
        # An awaitable that yields what asyncio does not know: asyncio refuses
        # it in its own words, at the await.
        r = run("""
            class Foreign:
                def __await__(self):
                    yield "a future of some event loop"
                    return 1
            v = await tools.search(2)
            await Foreign()
        """)
        self.assertTrue(r.done["error"]["message"].endswith("RuntimeError: Task got bad yield: 'a future of some event loop'"),
                        r.done)
        self.assertEqual(len(r.calls), 1)

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
        self.assertEqual(r.done["value"], ["told: Task got bad yield: ", {"echo": 1}])

    def test_bare_yield_resumes(self):
        # A types.coroutine that yields nothing gives way to the loop's other
        # tasks, as asyncio.sleep(0) does.
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

    def test_a_signal_handler_that_raises(self):
        # A handler set with signal.signal that raises while the loop waits
        # for a reply: the exception leaves the loop, as asyncio has it, and
        # ends the program with its traceback.
        def answer(call):
            return None if call["args"] == "slow" else H.default_answer(call)

        r = run("""
            import signal
            def give_up(*a):
                raise TimeoutError("too slow")
            signal.signal(signal.SIGALRM, give_up)
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            await tools.search("slow")
        """, answer=answer)
        self.assertTrue(r.done["error"]["message"].endswith("TimeoutError: too slow"), r.done)
        self.assertEqual([c["id"] for c in r.calls], [0])


class Warming(unittest.TestCase):
    """A child left waiting for run imports asyncio meanwhile."""

    def run_after(self, idle, program):
        """Run program in a child left idle for idle seconds, or, if idle is None,
        until it has warmed up."""
        host = H.Host()
        try:
            ack = host.boot()
            self.assertEqual(ack, {"type": "boot-ack"})
            if idle is None:
                self.wait_warm(host.proc.pid)
            else:
                time.sleep(idle)  # the idle time under test: which step of warming it meets
            return host.run(textwrap.dedent(program))
        except BaseException:
            host.kill()
            raise

    @staticmethod
    def wait_warm(pid):
        """Wait until the child has made its event loop, warming's last step: its
        loop's epoll descriptor is the first the child opens."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[eventpoll]":
                        return
                except OSError:
                    pass
            time.sleep(0.01)
        raise AssertionError(f"child {pid} did not warm up within 30s")

    def test_warmed_child_runs(self):
        r = self.run_after(None, "import sys\nreturn ['asyncio' in sys.modules, await tools.search(1)]")
        self.assertEqual(r.done["value"], [True, {"echo": 1}])
        r = self.run_after(None, """
            import asyncio
            out = await asyncio.gather(*(tools.search(i) for i in range(50)))
            return [o["echo"] for o in out] == list(range(50))
        """)
        self.assertEqual(r.done, {"type": "done", "value": True})

    def test_calls_from_another_event_loop(self):
        # A thread's own asyncio.run: its calls' replies reach its loop.
        r = self.run_after(None, """
            import asyncio, threading
            async def both():
                return [await tools.search(1), await tools.search(2)]
            out = []
            t = threading.Thread(target=lambda: out.append(asyncio.run(both())))
            t.start()
            await asyncio.to_thread(t.join)
            return [out, await tools.search(3)]
        """)
        self.assertEqual(r.done["value"], [[[{"echo": 1}, {"echo": 2}]], {"echo": 3}])

    def test_run_during_warm_up(self):
        for idle in (0.45, 0.5, 0.55, 0.6, 0.7):
            with self.subTest(idle=idle):
                r = self.run_after(idle, "import asyncio\nawait asyncio.sleep(0)\nreturn await tools.search(1)")
                self.assertEqual(r.done, {"type": "done", "value": {"echo": 1}})
                r = self.run_after(idle, "return await tools.search(2)")
                self.assertEqual(r.done, {"type": "done", "value": {"echo": 2}})


if __name__ == "__main__":
    unittest.main()
