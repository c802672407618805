"""The worker streams a cell's stdout and stderr while it runs, and reports what a cell
raised in parts: tested against a real worker process through the fake host."""
import time
import unittest

from kiln import wire
from kiln.output import STREAM_BYTES, STREAM_SECONDS
from tests.test_worker import WorkerTestCase


def merged(chunks):
    """Merge output messages by stream into records, as the ledger merges writes."""
    records = []
    for chunk in chunks:
        if records and records[-1]["stream"] == chunk["stream"]:
            records[-1]["text"] += chunk["text"]
        else:
            records.append({"stream": chunk["stream"], "text": chunk["text"]})
    return records


def streamed_records(output):
    """The stdout and stderr records of a completion's output, merged by stream."""
    return merged([r for r in output if r["stream"] in (wire.STREAM_STDOUT, wire.STREAM_STDERR)])


class StreamingTest(WorkerTestCase):
    def chunks(self):
        return [message for _, message in self.host.streamed]

    def test_a_line_reaches_the_host_before_the_cell_ends(self):
        cell_id = self.host.start("print('early')\nawait runtime.request('workspace.info')")
        kind, message = self.host.recv()
        self.assertEqual(kind, wire.HOST_REQUEST)  # the cell now waits for the host
        self.assertEqual(self.chunks(), [{"kind": wire.OUTPUT, "execution_id": cell_id,
                                          "stream": "stdout", "text": "early\n"}])
        self.host.send(wire.HOST_REPLY, id=message["id"], execution_id=cell_id,
                       reply={"kind": wire.REPLY_OK, "value": None})
        result = self.host.completed(cell_id)
        self.assertEqual(result["output"], [{"stream": "stdout", "text": "early\n"}])

    def test_text_without_a_newline_is_sent_within_the_window(self):
        cell_id = self.host.start("import sys\nprint('a'); print('partial', end='')\n"
                                  "sys.stderr.write('e')\nawait runtime.request('workspace.info')")
        kind, message = self.host.recv()
        self.assertEqual(kind, wire.HOST_REQUEST)
        self.host.sock.settimeout(10)
        while len(merged(self.chunks())) < 2 or merged(self.chunks())[-1]["text"] != "e":
            kind, chunk = wire.decode(wire.read_frame(self.host.reader), "root", "g-1")
            self.assertEqual(kind, wire.OUTPUT)
            self.host.streamed.append((0, chunk))
        self.assertEqual(merged(self.chunks()), [{"stream": "stdout", "text": "a\npartial"},
                                                 {"stream": "stderr", "text": "e"}])
        self.host.send(wire.HOST_REPLY, id=message["id"], execution_id=cell_id,
                       reply={"kind": wire.REPLY_OK, "value": None})
        self.host.completed(cell_id)

    def test_cells_that_leave_text_waiting_share_one_timer_thread(self):
        for text in ("a", "b"):
            self.host.streamed.clear()
            cell_id = self.host.start(f"print({text!r}, end='')\nawait runtime.request('workspace.info')")
            kind, message = self.host.recv()
            self.assertEqual(kind, wire.HOST_REQUEST)
            self.host.sock.settimeout(10)
            while not self.chunks():  # the timer sends the waiting text
                kind, chunk = wire.decode(wire.read_frame(self.host.reader), "root", "g-1")
                self.assertEqual(kind, wire.OUTPUT)
                self.host.streamed.append((0, chunk))
            self.assertEqual(merged(self.chunks()), [{"stream": "stdout", "text": text}])
            self.host.send(wire.HOST_REPLY, id=message["id"], execution_id=cell_id,
                           reply={"kind": wire.REPLY_OK, "value": None})
            self.host.completed(cell_id)
        result = self.host.run("import threading\n[t.name for t in threading.enumerate() "
                               "if t is not threading.main_thread()]")
        self.assertEqual(result["output"], [{"stream": "result", "text": "['kiln-output']"}])

    def test_flush_sends_at_once(self):
        cell_id = self.host.start("print('a', end='', flush=True)\nawait runtime.request('workspace.info')")
        kind, message = self.host.recv()
        self.assertEqual(kind, wire.HOST_REQUEST)
        self.assertEqual(merged(self.chunks()), [{"stream": "stdout", "text": "a"}])
        self.host.send(wire.HOST_REPLY, id=message["id"], execution_id=cell_id,
                       reply={"kind": wire.REPLY_OK, "value": None})
        self.host.completed(cell_id)

    def test_what_was_streamed_is_the_record(self):
        for code in [
            "import sys\nfor i in range(20000):\n    print(i)\n    print(-i, file=sys.stderr)",
            "print('x' * 10_000_000)\nprint('after')",
            "import threading\ndef w(n):\n    for i in range(2000):\n        print(n, i)\n"
            "ts = [threading.Thread(target=w, args=(n,)) for n in range(4)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n'done'",
            "import sys\nsys.stdout.write('é' * 70000)",
        ]:
            with self.subTest(code=code[:30]):
                self.host.streamed.clear()
                result = self.host.run(code, timeout=60)
                self.assertEqual(result["status"], wire.STATUS_OK, result["error"])
                self.assertEqual(merged(self.chunks()), streamed_records(result["output"]))
                self.assertGreater(len(self.chunks()), 0)

    def test_chunks_are_batched(self):
        started = time.monotonic()
        result = self.host.run("for i in range(5000):\n    print(i)")
        windows = (time.monotonic() - started) / STREAM_SECONDS  # however slow the machine
        size = sum(len(r["text"]) for r in result["output"])
        # One chunk per STREAM_BYTES, plus one per window the cell ran through, at most.
        self.assertLess(len(self.chunks()), size // STREAM_BYTES + windows + 2)
        self.assertTrue(all(len(c["text"].encode()) <= wire.MAX_OUTPUT_BYTES for c in self.chunks()))

    def test_a_quiet_cell_streams_nothing(self):
        self.assertEqual(self.host.value("1 + 1"), "2")
        self.assertEqual(self.host.streamed, [])

    def test_an_interrupted_cell_keeps_what_it_streamed(self):
        cell_id = self.host.start("import time\nprint('before')\nwhile True:\n    time.sleep(0.01)")
        while not self.host.streamed:
            kind, chunk = wire.decode(wire.read_frame(self.host.reader), "root", "g-1")
            self.assertEqual(kind, wire.OUTPUT)
            self.host.streamed.append((0, chunk))
        self.host.send(wire.INTERRUPT, id=cell_id)
        result = self.host.completed(cell_id)
        self.assertEqual(result["status"], wire.STATUS_INTERRUPTED)
        self.assertEqual(merged(self.chunks()), streamed_records(result["output"]))


class BinaryBufferTest(WorkerTestCase):
    def test_buffer_writes_decode_across_writes(self):
        result = self.host.run("import sys\nsys.stdout.buffer.write(b'\\xc3')\n"
                               "sys.stdout.buffer.write(b'\\xa9\\n')\nsys.stderr.buffer.write(b'x')\n"
                               "(sys.stdout.encoding, sys.stdout.errors, sys.stdout.isatty(), "
                               "sys.stdout.fileno(), sys.stderr.buffer.fileno())")
        self.assertEqual(result["output"], [{"stream": "stdout", "text": "é\n"},
                                            {"stream": "stderr", "text": "x"},
                                            {"stream": "result", "text": "('utf-8', 'replace', False, 1, 2)"}])


class ExceptionPartsTest(WorkerTestCase):
    def test_a_failed_cell_says_what_it_raised(self):
        result = self.host.run("def f():\n    raise ValueError('bad value')\nf()")
        self.assertEqual(result["status"], wire.STATUS_ERROR)
        self.assertEqual(result["exception"], {"type": "ValueError", "value": "bad value",
                                               "traceback": result["error"]})

    def test_a_syntax_error_in_parts(self):
        result = self.host.run("def (")
        self.assertEqual(result["exception"]["type"], "SyntaxError")
        self.assertEqual(result["exception"]["traceback"], result["error"])

    def test_an_unprintable_value(self):
        result = self.host.run("class E(Exception):\n    def __str__(self):\n        raise RuntimeError\n"
                               "raise E()")
        self.assertEqual(result["exception"]["type"], "E")
        self.assertEqual(result["exception"]["value"], "<unprintable E object>")

    def test_an_ok_cell_has_no_exception(self):
        self.assertNotIn("exception", self.host.run("1"))


class InputTest(WorkerTestCase):
    def ask(self, code):
        cell_id = self.host.start(code)
        kind, message = self.host.recv()
        self.assertEqual((kind, message["request"]["method"]), (wire.HOST_REQUEST, "runtime.input"))
        return cell_id, message

    def answer(self, request, **reply):
        self.host.send(wire.HOST_REPLY, id=request["id"], execution_id=request["execution_id"], reply=reply)

    def test_input_asks_the_host_with_its_prompt(self):
        cell_id, message = self.ask("print('before')\nx = input('name? ')\nx.upper()")
        self.assertEqual(message["request"], {"method": "runtime.input", "prompt": "name? "})
        self.assertEqual(self.chunks(), [{"kind": wire.OUTPUT, "execution_id": cell_id, "stream": "stdout",
                                          "text": "before\n"}])
        self.answer(message, kind=wire.REPLY_OK, value="maya")
        result = self.host.completed(cell_id)
        self.assertEqual(result["output"][-1], {"stream": "result", "text": "'MAYA'"})

    def chunks(self):
        return [message for _, message in self.host.streamed]

    def test_the_end_of_the_input_and_no_one_to_ask(self):
        for reply, value in [({"kind": wire.REPLY_OK, "value": None}, ""),
                             ({"kind": wire.REPLY_ERROR, "code": "no_input", "message": "nobody"}, "nobody")]:
            cell_id, request = self.ask("input()")
            self.answer(request, **reply)
            result = self.host.completed(cell_id)
            self.assertEqual((result["exception"]["type"], result["exception"]["value"]), ("EOFError", value))

    def test_an_interrupt_ends_a_cell_waiting_for_input(self):
        cell_id, message = self.ask("input('x')")
        self.host.send(wire.INTERRUPT, id=cell_id)
        result = self.host.completed(cell_id)
        self.assertEqual(result["status"], wire.STATUS_INTERRUPTED)
        self.assertEqual(self.host.value("1 + 1"), "2")

    def test_stdin_reads_lines_asked_of_the_host(self):
        cell_id, message = self.ask("import sys\n(sys.stdin.readline(), sys.stdin.read())")
        self.answer(message, kind=wire.REPLY_OK, value="one")
        for value in ["two", None]:
            kind, message = self.host.recv()
            self.answer(message, kind=wire.REPLY_OK, value=value)
        result = self.host.completed(cell_id)
        self.assertEqual(result["output"], [{"stream": "result", "text": "('one\\n', 'two\\n')"}])


if __name__ == "__main__":
    unittest.main()
