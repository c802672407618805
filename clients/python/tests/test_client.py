"""Tests of kiln_client against a real daemon: KILN_TEST_SOCKET names its socket."""

import os
import threading
import unittest

import kiln_client
import tempfile
import time

from kiln_client import (Busy, CannotApply, Client, Conflict, InvalidRequest, NotFound, SettingsDiffer, Stopped,
                         Unauthorized, Unavailable, default_socket)

#: Cells that run until a limit stops them.
MEMORY_BOMB = "data = []\nwhile True:\n    data.append(bytearray(10**6))"
BUSY_LOOP = "while True:\n    pass"
SLEEP = "import time\ntime.sleep(3600)"
FORK_BOMB = """import os, signal
kids = []
try:
    for _ in range(40):
        pid = os.fork()
        if pid == 0:
            while True:
                signal.pause()
        kids.append(pid)
finally:
    for k in kids:
        os.kill(k, signal.SIGKILL)
        os.waitpid(k, 0)
"""


def client() -> Client:
    return Client(os.environ["KILN_TEST_SOCKET"])


class ClientTest(unittest.TestCase):
    def test_namespace_lives_across_executions(self):
        s = client().session("py-ns")
        self.assertEqual(s.execute("x = 20\nx + 1").result, "21")
        rec = s.execute("print('hi')\nx * 2")
        self.assertEqual((rec.status, rec.stdout, rec.result), ("ok", "hi\n", "40"))
        self.assertEqual(client().session("py-ns").execute("x").result, "20")  # attached, not new

    def test_a_session_has_instructions_of_its_own(self):
        s = client().session("py-instr", instructions="Answer in French.")
        rec = s.execute("r = await runtime.request('runtime.instructions')\n'Answer in French.' in str(r)")
        self.assertEqual(rec.result, "True")
        with self.assertRaises(InvalidRequest):  # this daemon runs no agent
            client().session("py-route", route="main")

    def test_limits_stop_cells(self):
        for id, kw, code, status, limit in (
                ("py-mem", {"limits": {"memory_bytes": 256 << 20}}, MEMORY_BOMB, "error", "memory"),
                ("py-cpu", {"limits": {"cpu_seconds": 1}}, BUSY_LOOP, "error", "cpu_seconds"),
                ("py-wall", {"limits": {"wall_ms": 500}}, SLEEP, "interrupted", "timeout"),
                ("py-pids", {"sandbox": "workspace", "limits": {"max_processes": 32}}, FORK_BOMB, "error",
                 "max_processes")):
            with self.subTest(id):
                s = client().session(id, **kw)
                rec = s.execute(code)
                self.assertEqual((rec.status, rec.limit), (status, limit), rec)
        info = kiln_client.Session(client(), "py-pids").info()
        self.assertEqual((info["config"]["sandbox"], info["sandbox"]["profile"], info["sandbox"]["max_processes"]),
                         ("workspace", "workspace", 32))
        client().session("py-mem", limits={"memory_bytes": 256 << 20})  # the same: attached
        with self.assertRaises(SettingsDiffer) as cm:
            client().session("py-mem", limits={"memory_bytes": 512 << 20})
        self.assertIn("limits.memory_bytes 268435456, not 536870912", str(cm.exception))
        with self.assertRaises(SettingsDiffer):
            client().session("py-mem", sandbox="strict")

    def test_the_daemon_decides_what_differs(self):
        client().session("py-found", limits={"memory_bytes": 256 << 20, "tool_timeout_ms": 5000})
        client().session("py-found", limits={"tool_timeout_ms": 9000})  # attached: it keeps its own
        info = kiln_client.Session(client(), "py-found").info()
        self.assertEqual(info["config"]["limits"]["tool_timeout_ms"], 5000)
        with self.assertRaises(SettingsDiffer) as cm:
            client().session("py-found", limits={"memory_bytes": 512 << 20, "tool_timeout_ms": 9000})
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "settings_differ"))
        self.assertEqual(cm.exception.detail, "session py-found is open with limits.memory_bytes 268435456, not 536870912")

    def test_settings_refused(self):
        with self.assertRaises(CannotApply) as cm:
            client().session("py-no-pids", sandbox="none", limits={"max_processes": 32})
        self.assertIn("needs a confining sandbox", cm.exception.detail)
        for kw, says in (({"limits": {"memory_bytes": -1}}, "limits.memory_bytes"),
                         ({"limits": {"memory_bytes": (64 << 20) - 1}}, "limits.memory_bytes"),
                         ({"limits": {"max_processes": 15}}, "limits.max_processes"),
                         ({"limits": {"memory": 1}}, "/limits/memory"),
                         ({"sandbox": "jail"}, "sandbox"),
                         ({"network": "http"}, "network")):
            with self.subTest(kw):
                with self.assertRaises(InvalidRequest) as cm:
                    client().session("py-refused", **kw)
                self.assertIn(says, cm.exception.detail)

    def test_record_says_when_and_what_was_raised(self):
        rec = client().session("py-raise").execute("raise ValueError('v')")
        self.assertEqual(rec.status, "error")
        self.assertEqual((rec.exception["type"], rec.exception["value"]), ("ValueError", "v"))
        self.assertIn("ValueError: v", rec.exception["traceback"])
        self.assertTrue(rec.started_at.endswith("Z") and rec.ended_at.endswith("Z"), (rec.started_at, rec.ended_at))

    def test_output_as_it_comes(self):
        s = client().session("py-out")
        seen = []
        rec = s.execute("import sys\nprint('a', flush=True)\nprint('b', file=sys.stderr, flush=True)\n7",
                        on_output=lambda stream, text: seen.append((stream, text)))
        self.assertEqual(rec.result, "7")
        # Chunk boundaries are the runtime's to choose (a flush timer may cut "a" from its
        # newline): what is promised is the text of each stream, in order.
        joined = []
        for stream, text in seen:
            if joined and joined[-1][0] == stream:
                joined[-1] = (stream, joined[-1][1] + text)
            else:
                joined.append((stream, text))
        self.assertEqual(joined, [("stdout", "a\n"), ("stderr", "b\n")])

    def test_timeout_interrupts(self):
        s = client().session("py-timeout")
        s.execute("import time")
        rec = s.execute("while True: time.sleep(0.01)", timeout=0.5)
        self.assertEqual((rec.status, rec.limit), ("interrupted", None))  # the client's timeout, not the cell's
        self.assertFalse(rec.namespace_lost)
        self.assertEqual(s.execute("1 + 1").result, "2")

    def test_interrupt_from_another_thread(self):
        s = client().session("py-interrupt")
        s.execute("import time")
        started = threading.Event()
        out = {}

        def run():
            out["rec"] = s.execute("print('go', flush=True)\nwhile True: time.sleep(0.01)",
                                   on_output=lambda stream, text: started.set())
        t = threading.Thread(target=run)
        t.start()
        self.assertTrue(started.wait(20))
        got = s.interrupt()
        t.join(20)
        self.assertEqual(got.status, "interrupted")
        self.assertEqual(out["rec"].status, "interrupted")

    def test_typed_problems(self):
        c = client()
        with self.assertRaises(NotFound) as cm:
            kiln_client.Session(c, "py-nobody").info()
        self.assertEqual(cm.exception.code, "session_not_found")
        s = c.session("py-busy")
        status, loc, _ = c._call("POST", "/v1/sessions/py-busy/executions",
                                 {"code": "import time\ntime.sleep(30)", "wait_ms": 0})
        self.assertEqual(status, 202)
        with self.assertRaises(Busy):
            s.execute("1")
        self.assertEqual(s.interrupt().status, "interrupted")
        with self.assertRaises(InvalidRequest) as cm:
            c._call("POST", "/v1/sessions/py-busy/executions", {"code": "1", "extra": True})
        self.assertEqual(cm.exception.code, "unknown_field")
        with self.assertRaises(Conflict):
            c._call("POST", loc + "/interrupt")
        s.stop()
        with self.assertRaises(Stopped):
            s.execute("1")

    def test_events_resume(self):
        s = client().session("py-events")
        s.execute("print(1)")
        events = list(s.events(after=0, follow=False))
        kinds = [e.kind for e in events]
        self.assertIn("execution.end", kinds)
        seqs = [e.seq for e in events]
        self.assertEqual(seqs, sorted(seqs))
        rest = list(s.events(after=seqs[2], follow=False))
        self.assertEqual([e.seq for e in rest], seqs[3:])
        follow = s.events(after=seqs[-1])
        s.execute("import time")
        self.assertEqual(next(follow).kind, "execution")
        self.assertEqual(next(follow).kind, "execution.end")
        # A running cell's output comes as it prints, before the cell ends.
        s.client._call("POST", "/v1/sessions/py-events/executions",
                       {"code": "print('out', flush=True)\nwhile True: time.sleep(0.01)", "wait_ms": 0})
        self.assertEqual(next(follow).kind, "execution")
        out = next(follow)
        self.assertEqual((out.kind, out.record["index"], out.record["text"]), ("output", 0, "out\n"))
        self.assertGreater(out.seq, seqs[-1])
        self.assertEqual(s.interrupt().status, "interrupted")

    def test_tcp_with_the_token(self):
        url, token = os.environ["KILN_TEST_URL"], os.environ["KILN_TEST_TOKEN"]
        self.assertEqual(Client(url, token=token).session("py-tcp").execute("3 * 3").result, "9")
        with self.assertRaises(Unauthorized) as cm:
            Client(url).sessions()
        self.assertEqual(cm.exception.code, "unauthorized")
        with self.assertRaises(Unauthorized):
            Client(url, token="wrong").sessions()

    def test_a_problem_says_what_it_is(self):
        s = client().session("py-str")
        client()._call("POST", "/v1/sessions/py-str/executions", {"code": "import time\ntime.sleep(30)", "wait_ms": 0})
        with self.assertRaises(Busy) as cm:
            s.execute("1")
        self.assertFalse(str(cm.exception).startswith("Conflict"), str(cm.exception))
        self.assertIn("(409 busy)", str(cm.exception))
        s.interrupt()

    def test_default_socket_follows_the_data_directory(self):
        self.assertEqual(default_socket({"XDG_DATA_HOME": "/x", "HOME": "/h"}), "/x/kiln/kiln.sock")
        self.assertEqual(default_socket({"XDG_DATA_HOME": "rel", "HOME": "/h"}), "/h/.local/share/kiln/kiln.sock")
        with self.assertRaises(Unavailable):
            default_socket({})

    def test_no_daemon_is_unavailable(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(Unavailable):
                Client(os.path.join(d, "kiln.sock"), retry_for=0).sessions()
            start = time.monotonic()
            with self.assertRaises(Unavailable):
                Client(os.path.join(d, "kiln.sock"), retry_for=0.3).sessions()
            self.assertGreaterEqual(time.monotonic() - start, 0.3)
        with self.assertRaises(Unavailable):
            Client("http://127.0.0.1:1", retry_for=0).sessions()

    def test_execution_ids_are_one(self):
        s = client().session("py-ids")
        rec = s.execute("print('x')")
        self.assertEqual(rec.id, "py-ids:" + rec.cell)
        self.assertEqual(client().execution(rec.id).id, rec.id)
        named = {e.record["execution_id"] for e in s.events(after=0, follow=False)
                 if isinstance(e.record, dict) and "execution_id" in e.record}
        self.assertEqual(named, {rec.id})

    def test_displays_and_files(self):
        s = client().session("py-display")
        dot = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
        rec = s.execute("import base64\nclass Dot:\n    def _repr_png_(self): return base64.b64decode('%s')\n"
                        "display(Dot())\ndisplay('plain')" % dot)
        self.assertEqual(len(rec.displays), 2)
        image = rec.display(0)
        import base64
        self.assertEqual((image.mime_type, image.data), ("image/png", base64.b64decode(dot)))
        self.assertEqual((rec.display(1).mime_type, rec.display(1).text), ("text/plain", "'plain'"))
        with self.assertRaises(NotFound):
            rec.display(2)
        self.assertEqual(s.write_file("sub dir/a.txt", "héllo"), len("héllo".encode()))
        self.assertEqual(s.read_file("sub dir/a.txt"), "héllo".encode())
        self.assertEqual(s.execute("open('sub dir/a.txt').read()").result, "'héllo'")
        with self.assertRaises(NotFound):
            s.read_file("absent.txt")

    def test_run_program(self):
        res = client().run_program("return [1, 'two', None]")
        self.assertEqual(res["status"], "ok")
        self.assertEqual(res["value"], [1, "two", None])
        self.assertEqual(client().run_program("while True: pass", limits={"wall_ms": 200})["status"], "timeout")


if __name__ == "__main__":
    unittest.main()
