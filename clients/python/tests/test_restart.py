"""The client across a daemon's restarts: KILN_TEST_KILN names a kiln binary, and each
test runs a daemon of its own on a data directory of its own, stops it and starts it."""

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import kiln_client
from kiln_client import Client, Unavailable


class Daemon(unittest.TestCase):
    """A test with a daemon of its own, on a data directory of its own; ``config`` is
    written as its kiln.toml when not empty."""

    config = ""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ks")
        self.workspace = tempfile.mkdtemp()
        self.socket = os.path.join(self.dir, "kiln.sock")
        self.daemon = None
        if self.config:
            with open(os.path.join(self.dir, "kiln.toml"), "w", encoding="utf-8") as f:
                f.write(self.config)
        self.start()

    def tearDown(self):
        self.stop(signal.SIGTERM)
        subprocess.run(["rm", "-rf", self.dir, self.workspace], check=True)

    def start(self):
        self.daemon = subprocess.Popen([os.environ["KILN_TEST_KILN"], "serve", "--data", self.dir,
                                        "--workspace", self.workspace], stderr=subprocess.PIPE, text=True)
        lines = []
        while not (lines and lines[-1].startswith("kiln: serving on ")):
            line = self.daemon.stderr.readline()
            self.assertTrue(line, "kiln serve ended before serving: " + "".join(lines))
            lines.append(line)
        stderr = self.daemon.stderr
        threading.Thread(target=lambda: (stderr.read(), stderr.close()), daemon=True).start()

    def stop(self, sig):
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(sig)
            self.daemon.wait(30)
        self.daemon = None



@unittest.skipUnless(os.environ.get("KILN_TEST_KILN"), "KILN_TEST_KILN names no kiln binary")
class RestartTest(Daemon):
    def test_execute_across_a_kill(self):
        """A daemon killed mid-execute: the call retries its key once the daemon is back,
        and is answered the first execution, recorded failed; the cell ran once."""
        c = Client(self.socket)
        s = c.session("r")
        s.execute("import os")
        out = {}

        def run():
            try:
                out["rec"] = s.execute("print('once', flush=True)\nimport time\ntime.sleep(60)")
            except Exception as e:  # noqa: BLE001 - reported below
                out["err"] = e
        t = threading.Thread(target=run)
        t.start()
        while "once" not in "".join(e.record.get("text", "") for e in s.events(after=0, follow=False)
                                     if e.kind == "output"):
            time.sleep(0.05)
        self.stop(signal.SIGKILL)
        self.start()
        t.join(60)
        self.assertNotIn("err", out, out.get("err"))
        rec = out["rec"]
        self.assertEqual((rec.cell, rec.status), ("c-2", "failed"), rec)
        starts = [e for e in s.events(after=0, follow=False) if e.kind == "execution"]
        self.assertEqual([e.record["cell"] for e in starts], ["c-1", "c-2"])

    def test_execute_across_a_sigterm(self):
        """A daemon stopped with SIGTERM mid-execute answers, once back, the interrupted
        record the stop wrote, not running."""
        s = Client(self.socket).session("t")
        out = {}

        def run():
            out["rec"] = s.execute("print('go', flush=True)\nimport time\ntime.sleep(60)")
        t = threading.Thread(target=run)
        t.start()
        while not any(e.kind == "output" for e in s.events(after=0, follow=False)):
            time.sleep(0.05)
        self.stop(signal.SIGTERM)
        self.start()
        t.join(60)
        self.assertEqual(out["rec"].status, "interrupted", out["rec"])

    def test_events_follow_across_a_restart(self):
        """events(follow=True) goes on across a restart, with no gap and no repeat."""
        c = Client(self.socket)
        s = c.session("e")
        s.execute("1")
        follow = s.events(after=0)
        seen = [next(follow) for _ in range(3)]
        self.stop(signal.SIGTERM)
        self.start()
        s.execute("2")
        got = []
        for e in follow:
            got.append(e)
            if e.kind == "execution.end" and e.record["cell"] == "c-2":
                break
        seqs = [e.seq for e in seen + got]
        self.assertEqual(seqs, sorted(set(seqs)))
        self.assertEqual(seqs, [e.seq for e in s.events(after=0, follow=False)][:len(seqs)])

    def test_unavailable_after_retry_for(self):
        self.stop(signal.SIGTERM)
        start = time.monotonic()
        with self.assertRaises(Unavailable):
            Client(self.socket, retry_for=0.5).session("gone")
        self.assertGreaterEqual(time.monotonic() - start, 0.5)
        self.assertIsInstance(Unavailable("x"), kiln_client.TransportError)


@unittest.skipUnless(os.environ.get("KILN_TEST_KILN"), "KILN_TEST_KILN names no kiln binary")
class ApprovalTest(Daemon):
    """Cells of a session's agent held for the operator: its route is a script of replies,
    and kiln.toml holds every cell."""

    config = ('[routes.s]\nkind = "script"\nscript = "replies.jsonl"\n\n'
              '[agent]\nroute = "s"\nreview = "hold"\n')

    # The third reply's code is held as the daemon is killed; once approved after the
    # restart, the model sends it again (the fourth) and it runs unheld.
    replies = "".join(json.dumps({"code": code}) + "\n" for code in [
        "print('approved ran')", "print('never')", "import time; time.sleep(0)",
        "import time; time.sleep(0)", "await runtime.wait(None, reason='done')"])

    def start(self):
        with open(os.path.join(self.dir, "replies.jsonl"), "w", encoding="utf-8") as f:
            f.write(self.replies)
        super().start()

    def held(self, s, n=1):
        """Wait for n cells of s held; return them."""
        deadline = time.monotonic() + 60
        while len(held := s.held()) < n:
            self.assertLess(time.monotonic(), deadline, "no cell was held")
            time.sleep(0.05)
        return held

    def test_approve_and_reject_across_a_restart(self):
        """approve runs a held cell, reject does not; a decision for a cell not held is
        not_held; a hold the daemon's kill left is held again, and approving it resumes
        the turn."""
        c = Client(self.socket)
        s = c.session("a")
        s.send("go")
        first = self.held(s)[0]
        self.assertNotIn("restarted", first)
        d = c.approve("a:" + first["cell"])
        self.assertEqual((d["cell"], d["decision"]), (first["cell"], "approved"))
        with self.assertRaises(kiln_client.Conflict) as caught:
            c.approve("a:" + first["cell"])
        self.assertEqual(caught.exception.code, "not_held")
        second = self.held(s)[0]
        d = c.reject("a:" + second["cell"], reason="not now")
        self.assertEqual((d["decision"], d["reason"]), ("rejected", "not now"))
        self.assertEqual(c.execution("a:" + second["cell"]).status, "failed")
        third = self.held(s)[0]

        self.stop(signal.SIGKILL)
        self.start()
        again = self.held(s)
        self.assertEqual([(h["cell"], h["restarted"]) for h in again], [(third["cell"], True)])
        d = c.approve("a:" + third["cell"])
        self.assertEqual(d["decision"], "approved")
        # The model reads the approval and sends the code again, which runs unheld.
        deadline = time.monotonic() + 60
        while not any(e.kind == "execution.decision" and "after the host restarted" in e.record["body"].get("reason", "")
                      for e in s.events(after=0, follow=False)):
            self.assertLess(time.monotonic(), deadline, "the approved code was not run again")
            time.sleep(0.05)
        self.assertEqual(c.execution("a:" + first["cell"]).stdout, "approved ran\n")
        self.assertEqual(c.execution("a:" + second["cell"]).stdout, "")

    def test_model_deltas_stream(self):
        """The pieces of the agent's model call reach the session's stream with deltas,
        and the stream of every session, naming the session; not a stream without."""
        c = Client(self.socket)
        s = c.session("d")
        own = s.events(after=0, deltas=True)
        every = c.events(after=0, deltas=True)
        next(own), next(every)  # the session's first event: both streams follow now
        s.send("go")
        code = ""
        for e in own:
            if e.kind == "model.delta":
                self.assertEqual((e.seq, e.record), (0, None))
                if e.raw["delta"] == "arguments":
                    code += e.raw["text"]
            if e.kind == "model_call":
                break
        self.assertIn("approved ran", code)
        for e in every:
            if e.kind == "model.delta" and e.session == "d":
                break
        own.close(), every.close()
        self.held(s)
        self.assertNotIn("model.delta", [e.kind for e in s.events(after=0, follow=False)])


if __name__ == "__main__":
    unittest.main()
