"""The workbench worker end to end: a real subprocess, with the test playing the host."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from kiln import wire

PKGROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = ("import sys; sys.path.insert(0, sys.argv[1]); from kiln.worker import main; "
            "main(sys.argv[2:])")
SESSION, GENERATION = "root", "g-1"


RESIGNAL_SECONDS = 0.05


class Host:
    """Starts a worker and speaks to it as the host does: an interrupt is the frame, then
    SIGINT, repeated until the operation completes; a shutdown is the frame, then SIGINT."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kiln-test-")
        path = os.path.join(self.dir, "worker.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.listener.settimeout(10)
        self.token = os.urandom(16).hex()
        self.stdout = open(os.path.join(self.dir, "stdout"), "w+b")
        self.stderr = open(os.path.join(self.dir, "stderr"), "w+b")
        self.started = time.perf_counter()
        self.streamed = []  # (arrival time, output message)
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", LAUNCHER, PKGROOT, "--socket", path,
             "--session", SESSION, "--generation", GENERATION],
            stdin=subprocess.PIPE, stdout=self.stdout, stderr=self.stderr)
        self.process.stdin.write(self.token.encode() + b"\n")
        self.process.stdin.flush()
        self.sock, _ = self.listener.accept()
        self.sock.settimeout(10)
        self.reader = self.sock.makefile("rb")
        self.hello = self.recv()
        self.hello_seconds = time.perf_counter() - self.started
        self.ids = 0
        self.interrupting = set()  # ids interrupted and not yet completed
        self.lock = threading.Lock()
        threading.Thread(target=self.resignal, daemon=True).start()

    def resignal(self):
        while self.process.poll() is None:
            time.sleep(RESIGNAL_SECONDS)
            with self.lock:
                if self.interrupting and self.process.poll() is None:
                    self.process.send_signal(signal.SIGINT)

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process.stdin.close()
        self.reader.close()
        self.sock.close()
        self.listener.close()
        self.stdout.close()
        self.stderr.close()
        shutil.rmtree(self.dir)

    def send(self, kind, **fields):
        wire.write_frame(self.sock, wire.encode(SESSION, GENERATION, kind, fields))
        if kind in (wire.INTERRUPT, wire.SHUTDOWN):
            with self.lock:
                if kind == wire.INTERRUPT:
                    self.interrupting.add(fields["id"])
                self.process.send_signal(signal.SIGINT)

    def recv(self, timeout=10):
        """Return the next message as (kind, message); output chunks are kept in
        self.streamed, with the time each came, not returned."""
        self.sock.settimeout(timeout)
        kind, message = wire.decode(wire.read_frame(self.reader), SESSION, GENERATION)
        while kind == wire.OUTPUT:
            self.streamed.append((time.perf_counter(), message))
            kind, message = wire.decode(wire.read_frame(self.reader), SESSION, GENERATION)
        if kind == wire.COMPLETED:
            with self.lock:
                self.interrupting.discard(message["id"])
        return kind, message

    def wait_output(self, text, timeout=10):
        """Read output chunks until one of text: a cell's readiness signal. Chunks are
        kept in self.streamed; any other message fails."""
        self.sock.settimeout(timeout)
        while True:
            kind, message = wire.decode(wire.read_frame(self.reader), SESSION, GENERATION)
            if kind != wire.OUTPUT:
                raise AssertionError(f"expected output {text!r}, got {kind} {message}")
            self.streamed.append((time.perf_counter(), message))
            if message["text"] == text:
                return

    def wait_stdout(self, text, timeout=10):
        """Wait until the worker's real stdout, where text printed between cells goes,
        holds text."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text.encode() in whole(self.stdout):
                return
            time.sleep(0.01)
        raise AssertionError(f"no {text!r} on the worker's stdout within {timeout}s")

    def next_id(self):
        self.ids += 1
        return f"c-{self.ids}"

    def start(self, code):
        """Send an execute; return its id."""
        cell_id = self.next_id()
        self.send(wire.EXECUTE, id=cell_id, code=code)
        return cell_id

    def completed(self, cell_id, timeout=10):
        """Wait for the completion of cell_id; return its result."""
        kind, message = self.recv(timeout)
        if (kind, message["id"]) != (wire.COMPLETED, cell_id):
            raise AssertionError(f"expected completed {cell_id}, got {kind} {message}")
        return message["result"]

    def run(self, code, timeout=10):
        """Execute code and return its result."""
        return self.completed(self.start(code), timeout)

    def value(self, code):
        """Execute code, which must succeed; return its displayed result, or None."""
        result = self.run(code)
        if result["status"] != wire.STATUS_OK:
            raise AssertionError(f"{code!r} ended {result['status']}: {result['error']}")
        shown = [r["text"] for r in result["output"] if r["stream"] == wire.STREAM_RESULT]
        return shown[0] if shown else None

    def exit_status(self, timeout):
        return self.process.wait(timeout)

    def diagnostics(self):
        return whole(self.stderr).decode("utf-8", "replace")


def whole(file):
    """What the file the worker writes holds, from its start. The worker shares the
    file's offset: a seek and a read here could miss what it writes meanwhile, and a
    buffered seek does not even move the offset, so the file is read by position."""
    fd = file.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0)


class WorkerTestCase(unittest.TestCase):
    def setUp(self):
        self.host = Host()
        self.addCleanup(self.host.close)


class SessionTest(WorkerTestCase):
    def test_hello(self):
        self.assertEqual(self.host.hello, (wire.HELLO, {
            "kind": wire.HELLO, "token": self.host.token, "role": wire.ROLE_WORKBENCH,
            "revision": None, "slots": []}))

    def test_namespace_and_underscore(self):
        self.assertIsNone(self.host.value("x = 20"))
        self.assertEqual(self.host.value("x + 1"), "21")
        self.assertEqual(self.host.value("_ * 2"), "42")
        self.assertEqual(self.host.value("import __main__\n__main__.x"), "20")

    def test_output_records(self):
        result = self.host.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\n"
                               "print('more')\n'done'")
        self.assertEqual(result, {"kind": wire.RESULT_CELL, "status": wire.STATUS_OK,
                                  "output": [{"stream": "stdout", "text": "out\n"},
                                             {"stream": "stderr", "text": "err\n"},
                                             {"stream": "stdout", "text": "more\n"},
                                             {"stream": "result", "text": "'done'"}],
                                  "truncated_bytes": 0, "error": None})

    def test_output_over_budget(self):
        result = self.host.run("print('x' * 10_000_000)\n'not shown'")
        self.assertEqual(result["status"], wire.STATUS_OK)
        self.assertEqual(sum(len(r["text"]) for r in result["output"]), wire.MAX_OUTPUT_BYTES)
        self.assertEqual(result["truncated_bytes"],
                         10_000_001 + len("'not shown'") - wire.MAX_OUTPUT_BYTES)

    def test_errors(self):
        result = self.host.run("def f():\n    raise ValueError('bad')\nf()")
        self.assertEqual(result["status"], wire.STATUS_ERROR)
        self.assertTrue(result["error"].startswith("Traceback (most recent call last):\n"))
        self.assertIn('line 3, in <module>\n    f()', result["error"])
        self.assertIn('line 2, in f\n    raise ValueError', result["error"])
        self.assertTrue(result["error"].endswith("ValueError: bad\n"))
        self.assertNotIn("kiln", result["error"])
        syntax = self.host.run("x = = 1")
        self.assertEqual(syntax["status"], wire.STATUS_ERROR)
        self.assertTrue(syntax["error"].startswith('  File "<cell-'), syntax["error"])
        self.assertIn("SyntaxError", syntax["error"])
        exited = self.host.run("import sys\nsys.exit(3)")
        self.assertEqual(exited["status"], wire.STATUS_ERROR)
        self.assertIn("SystemExit: 3", exited["error"])
        self.assertEqual(self.host.value("'still serving'"), "'still serving'")

    def test_background_task_keeps_running(self):
        self.host.value("import asyncio\nticks = []\n"
                        "async def tick():\n"
                        "    while True:\n"
                        "        ticks.append(1)\n"
                        "        if len(ticks) == 11:\n"
                        "            print('eleven ticks', flush=True)\n"
                        "        await asyncio.sleep(0.01)\n"
                        "ticker = asyncio.create_task(tick())")
        self.host.wait_stdout("eleven ticks\n")  # printed between cells
        self.assertEqual(self.host.value("len(ticks) > 10, ticker.done()"), "(True, False)")

    def test_text_printed_between_cells_goes_to_the_real_stdout(self):
        self.host.value("import asyncio\n"
                        "async def later():\n"
                        "    await asyncio.sleep(0.1)\n"
                        "    print('between cells')\n"
                        "asyncio.create_task(later())")
        self.host.wait_stdout("between cells\n")

    def test_token_is_not_visible_to_cells(self):
        shown = self.host.value(
            "import os, sys\n"
            "repr(dict(os.environ)) + repr(sys.argv) + repr(sys.__stdin__.read())"
            " + open('/proc/self/fd/0').read() + repr(vars(sys.modules['kiln.worker']))")
        self.assertNotIn(self.host.token, shown)
        self.assertEqual(self.host.value("sys.__stdin__.read(), os.read(0, 10)"), "('', b'')")

    def test_one_cell_at_a_time_and_no_invoke(self):
        # The worker reads while a cell awaits: a second execute waits for the first's
        # completion, then runs in the same namespace.
        running = self.host.start("x = await runtime.request('workspace.info')")
        kind, request = self.host.recv()
        self.assertEqual(kind, wire.HOST_REQUEST)  # the cell now waits for the host
        second = self.host.start("x is None")
        self.host.send(wire.HOST_REPLY, id=request["id"], execution_id=running,
                       reply={"kind": wire.REPLY_OK, "value": None})
        self.assertEqual(self.host.completed(running)["status"], wire.STATUS_OK)
        result = self.host.completed(second)
        self.assertEqual((result["status"], result["output"]),
                         (wire.STATUS_OK, [{"stream": "result", "text": "True"}]))
        self.host.send(wire.INVOKE, id="h-1", slot="delivery.review", input={})
        kind, message = self.host.recv()
        self.assertEqual((kind, message["id"], message["result"]["kind"]),
                         (wire.COMPLETED, "h-1", wire.RESULT_FAILED))
        self.assertIn("hooks", message["result"]["error"])


READY = "print('ready', flush=True)\n"  # a cell's readiness signal: see Host.wait_output


class InterruptTest(WorkerTestCase):
    CASES = {  # each prints READY just before it blocks
        "busy loop": READY + "while True: pass",
        "time.sleep": "import time\n" + READY + "time.sleep(1e9)",
        "blocking select": "import select\n" + READY + "select.select([], [], [], 1e9)",
        "slow __repr__": ("class Slow:\n"
                          "    def __repr__(self):\n"
                          "        " + READY +
                          "        while True: pass\n"
                          "Slow()"),
        "await asyncio.sleep": "import asyncio\n" + READY + "await asyncio.sleep(1e9)",
        "await Event.wait": "import asyncio\n" + READY + "await asyncio.Event().wait()",
        "background task holding the loop": ("import asyncio\n"
                                             "async def hog():\n"
                                             "    " + READY +
                                             "    while True: pass\n"
                                             "hog_task = asyncio.create_task(hog())\n"
                                             "await asyncio.sleep(1e9)"),
    }

    def interrupt(self, cell_id):
        """Interrupt cell_id; return its result. How soon it comes is measured by
        internal/worker's BenchmarkInterrupt; the bound here only tells a hang."""
        self.host.send(wire.INTERRUPT, id=cell_id)
        return self.host.completed(cell_id, timeout=30)

    def test_every_kind_of_wait(self):
        self.host.value("x = 20")
        for name, code in self.CASES.items():
            with self.subTest(name):
                cell_id = self.host.start(code)
                self.host.wait_output("ready\n")
                result = self.interrupt(cell_id)
                self.assertEqual(result["status"], wire.STATUS_INTERRUPTED, result)
                self.assertIn("KeyboardInterrupt", result["error"])
                self.assertEqual(self.host.value("x"), "20")
        self.assertEqual(self.host.value("hog_task.done()"), "True")

    def test_a_background_task_from_an_earlier_cell_holding_the_loop(self):
        self.host.value("x = 20\nimport asyncio\n"
                        "async def hog():\n"
                        "    await asyncio.sleep(0.2)\n"
                        "    print('hogging', flush=True)\n"
                        "    while True: pass\n"
                        "hog_task = asyncio.create_task(hog())")
        self.host.wait_stdout("hogging\n")  # printed between cells
        cell_id = self.host.start("ran = True")
        self.assertEqual(self.interrupt(cell_id)["status"], wire.STATUS_INTERRUPTED)
        self.assertEqual(self.host.value("x, hog_task.done(), 'ran' in globals()"),
                         "(20, True, False)")

    def test_a_background_task_that_swallows_the_interrupt(self):
        self.host.value("import asyncio\n"
                        "async def stubborn():\n"
                        "    print('stubborn', flush=True)\n"
                        "    while True:\n"
                        "        try:\n"
                        "            while True: pass\n"
                        "        except KeyboardInterrupt:\n"
                        "            await asyncio.sleep(0)\n"
                        "stubborn_task = asyncio.create_task(stubborn())")
        self.host.wait_stdout("stubborn\n")  # printed between cells
        cell_id = self.host.start("await asyncio.sleep(1e9)")
        self.assertEqual(self.interrupt(cell_id)["status"], wire.STATUS_INTERRUPTED)

    def test_a_thread_can_schedule_on_the_loop_while_the_worker_is_idle(self):
        self.host.value("import asyncio, threading\n"
                        "loop, hits = asyncio.get_running_loop(), []\n"
                        "def hit():\n"
                        "    hits.append(1)\n"
                        "    print('hit', flush=True)\n"
                        "threading.Timer(0.1, loop.call_soon_threadsafe, (hit,)).start()")
        self.host.wait_stdout("hit\n")  # idle, no task on the loop: the callback runs all the same
        self.assertEqual(self.host.value("hits"), "[1]")

    def test_interrupt_right_after_execute(self):
        self.host.value("x = 20")
        for _ in range(5):
            cell_id = self.host.next_id()
            self.host.send(wire.EXECUTE, id=cell_id, code="import time\ntime.sleep(30)")
            self.host.send(wire.INTERRUPT, id=cell_id)
            self.assertEqual(self.host.completed(cell_id, timeout=30)["status"],
                             wire.STATUS_INTERRUPTED)
        self.assertEqual(self.host.value("x"), "20")

    def test_interrupt_before_the_cell_starts(self):
        # A callback holds the loop until the host lets it go: the next cell cannot start
        # meanwhile.
        release = os.path.join(self.host.dir, "release")
        self.host.value("import asyncio, os, time\n"
                        "def hold():\n"
                        "    print('holding', flush=True)\n"
                        f"    while not os.path.exists({release!r}):\n"
                        "        time.sleep(0.01)\n"
                        "asyncio.get_running_loop().call_later(0.05, hold)")
        self.host.wait_stdout("holding\n")  # printed between cells
        cell_id = self.host.start("ran = True")
        self.host.send(wire.INTERRUPT, id=cell_id)
        open(release, "w").close()
        result = self.host.completed(cell_id)
        self.assertEqual((result["status"], result["error"]),
                         (wire.STATUS_INTERRUPTED, "KeyboardInterrupt"))
        self.assertEqual(self.host.value("'ran' in globals()"), "False")

    def test_each_interrupt_stops_the_cell_once(self):
        cell_id = self.host.start("import time\n"
                                  "try:\n"
                                  "    " + READY +
                                  "    time.sleep(1e9)\n"
                                  "except KeyboardInterrupt:\n"
                                  "    caught = True\n"
                                  "    print('caught', flush=True)\n"
                                  "time.sleep(1e9)")
        self.host.wait_output("ready\n")
        self.host.send(wire.INTERRUPT, id=cell_id)
        self.host.wait_output("caught\n")
        # The host resends SIGINT meanwhile: it must not stop the cell a second time.
        time.sleep(0.5)  # the window under test: a slow machine can shorten it, not fail it
        result = self.interrupt(cell_id)
        self.assertEqual(result["status"], wire.STATUS_INTERRUPTED)
        self.assertIn("line 8", result["error"])
        self.assertEqual(self.host.value("caught"), "True")

    def test_sigint_from_elsewhere_is_ignored(self):
        self.assertEqual(self.host.value("import os, signal, time\n"
                                         "os.kill(os.getpid(), signal.SIGINT)\n"
                                         "time.sleep(0.1)\n"
                                         "'survived'"), "'survived'")

    def test_interrupts_for_other_ids_are_dropped(self):
        self.host.send(wire.INTERRUPT, id="unknown")
        done = self.host.start("x = 1")
        self.host.completed(done)
        self.host.send(wire.INTERRUPT, id=done)
        self.assertEqual(self.host.value("import time\ntime.sleep(0.2)\nx + 1"), "2")


class HostRequestTest(WorkerTestCase):
    def request(self, cell_id):
        """Receive the next message, which must be a host_request from cell_id."""
        kind, message = self.host.recv()
        self.assertEqual((kind, message["execution_id"]), (wire.HOST_REQUEST, cell_id))
        return message

    def reply(self, request, **reply):
        self.host.send(wire.HOST_REPLY, id=request["id"], execution_id=request["execution_id"],
                       reply=reply)

    def test_round_trip(self):
        cell_id = self.host.start("await runtime.request('workspace.info', verbose=True)")
        message = self.request(cell_id)
        self.assertEqual(message["request"], {"method": "workspace.info", "verbose": True})
        self.assertEqual(message["id"], "r-1")
        self.reply(message, kind="ok", value={"a": [1, "é"]})
        result = self.host.completed(cell_id)
        self.assertEqual(result["output"], [{"stream": "result", "text": "{'a': [1, 'é']}"}])

    def test_error_reply_raises_host_error(self):
        cell_id = self.host.start(
            "from kiln.runtime import HostError\n"
            "try:\n"
            "    await runtime.request('nope')\n"
            "except HostError as exc:\n"
            "    caught = (exc.code, exc.message, isinstance(exc, runtime.HostError))\n"
            "caught")
        self.reply(self.request(cell_id), kind="error", code="unknown_method",
                   message="no such method")
        self.assertEqual(self.host.completed(cell_id)["output"][0]["text"],
                         "('unknown_method', 'no such method', True)")

    def test_uncaught_host_error(self):
        cell_id = self.host.start("await runtime.request('nope')")
        self.reply(self.request(cell_id), kind="error", code="denied", message="not now")
        result = self.host.completed(cell_id)
        self.assertEqual(result["status"], wire.STATUS_ERROR)
        self.assertTrue(result["error"].endswith("HostError: denied: not now\n"), result["error"])

    def test_late_reply_after_an_interrupt_is_discarded(self):
        cell_id = self.host.start("await runtime.request('slow')")
        stale = self.request(cell_id)
        self.host.send(wire.INTERRUPT, id=cell_id)
        self.assertEqual(self.host.completed(cell_id)["status"], wire.STATUS_INTERRUPTED)
        self.reply(stale, kind="ok", value="stale")
        cell_id = self.host.start("await runtime.request('again')")
        fresh = self.request(cell_id)
        self.reply(stale, kind="ok", value="stale again")
        self.reply(dict(fresh, execution_id="c-other"), kind="ok", value="wrong origin")
        self.reply(fresh, kind="ok", value="fresh")
        self.assertEqual(self.host.completed(cell_id)["output"][0]["text"], "'fresh'")

    def test_background_task_carries_its_cell_as_origin(self):
        first = self.host.start("import asyncio\n"
                                "async def later():\n"
                                "    await asyncio.sleep(0.1)\n"
                                "    return await runtime.request('bg')\n"
                                "bg = asyncio.create_task(later())")
        # The request comes once the cell has ended, unless the machine is slow to say so.
        got = dict(self.host.recv() for _ in range(2))
        self.assertEqual((got[wire.COMPLETED]["id"], got[wire.COMPLETED]["result"]["status"]),
                         (first, wire.STATUS_OK))
        message = got[wire.HOST_REQUEST]
        self.assertEqual(message["execution_id"], first)
        self.reply(message, kind="ok", value=5)
        self.assertEqual(self.host.value("await bg"), "5")

    def test_an_accepted_wait_ends_the_cell_yielded(self):
        cell_id = self.host.start("print('before')\n"
                                  "try:\n"
                                  "    await runtime.wait(5, 'r')\n"
                                  "except BaseException:\n"
                                  "    print('caught')\n"
                                  "print('below')")
        self.reply(self.request(cell_id), kind="ok", value={"status": "yielded", "reason": "r"})
        result = self.host.completed(cell_id)
        self.assertEqual((result["status"], result["error"]), (wire.STATUS_YIELDED, None))
        self.assertEqual("".join(r["text"] for r in result["output"]), "before\ncaught\nbelow\n")

    def test_a_wait_in_another_task_ends_the_cell(self):
        cell_id = self.host.start("import asyncio\n"
                                  "t = asyncio.ensure_future(runtime.wait(None, 'r'))\n"
                                  "await asyncio.sleep(30)\n"
                                  "print('not reached')")
        self.reply(self.request(cell_id), kind="ok", value={"status": "yielded"})
        result = self.host.completed(cell_id)
        self.assertEqual((result["status"], result["output"]), (wire.STATUS_YIELDED, []))

    def test_a_yield_the_host_did_not_accept_is_an_error(self):
        result = self.host.run("from kiln.runtime import Yielded\nraise Yielded({})")
        self.assertEqual(result["status"], wire.STATUS_ERROR)
        self.assertIn("Yielded", result["error"])
        pending = self.host.start("await runtime.wait(1)")
        self.reply(self.request(pending), kind="ok", value={"status": "input_pending", "inputs": []})
        self.assertEqual(self.host.completed(pending)["status"], wire.STATUS_OK)

    def test_replies_to_a_task_and_to_the_cell_read_together(self):
        cell_id = self.host.start("import asyncio\n"
                                  "t = asyncio.ensure_future(runtime.request('bg'))\n"
                                  "await asyncio.sleep(0)\n"
                                  "(await runtime.request('fg'), await t)")
        first, second = self.request(cell_id), self.request(cell_id)
        self.assertEqual((first["request"]["method"], second["request"]["method"]), ("bg", "fg"))
        frames = b"".join(wire.pack_frame(wire.encode(SESSION, GENERATION, wire.HOST_REPLY, {
            "id": m["id"], "execution_id": cell_id, "reply": {"kind": "ok", "value": v}}))
            for m, v in ((first, 1), (second, 2)))
        self.host.sock.sendall(frames)  # one write: whoever reads one reads both
        self.assertEqual(self.host.completed(cell_id)["output"][0]["text"], "(2, 1)")

    def test_unencodable_request_fails_in_the_cell(self):
        result = self.host.run("await runtime.request('x', value=float('nan'))")
        self.assertEqual(result["status"], wire.STATUS_ERROR)
        self.assertIn("ValueError", result["error"])
        self.assertEqual(self.host.value("1 + 1"), "2")


class LifecycleTest(WorkerTestCase):
    def test_shutdown_exits_zero_promptly(self):
        self.host.value("import threading, time\n"
                        "threading.Thread(target=time.sleep, args=(1000,)).start()")
        self.host.start(READY + "while True: pass")
        self.host.wait_output("ready\n")
        self.host.send(wire.SHUTDOWN)
        # Promptly: the thread would hold a worker that waited for it 1,000 s.
        self.assertEqual(self.host.exit_status(timeout=30), 0)

    def test_host_closing_the_socket_ends_the_worker(self):
        # Mid-cell: the worker reads the socket again when the cell ends.
        self.host.start("import time\ntime.sleep(0.3)")
        self.host.reader.close()
        self.host.sock.close()
        self.assertNotEqual(self.host.exit_status(timeout=30), 0)
        self.assertRegex(self.host.diagnostics(),
                         "the host closed the connection|cannot write to the host")

    def test_bad_frame_ends_the_worker(self):
        self.host.sock.sendall(wire.pack_frame(b"{not json"))
        self.assertNotEqual(self.host.exit_status(timeout=30), 0)
        self.assertIn("syntax", self.host.diagnostics())

    def test_identity_mismatch_ends_the_worker(self):
        wire.write_frame(self.host.sock, wire.encode(SESSION, "g-0", wire.SHUTDOWN, {}))
        self.assertNotEqual(self.host.exit_status(timeout=30), 0)
        self.assertIn("mismatch", self.host.diagnostics())

    def test_oversized_frame_ends_the_worker(self):
        self.host.sock.sendall((wire.MAX_FRAME_SIZE + 1).to_bytes(4, "big"))
        self.assertNotEqual(self.host.exit_status(timeout=30), 0)
        self.assertIn("out of range", self.host.diagnostics())


if __name__ == "__main__":
    unittest.main()
