"""kiln.output: the ledger at and past every limit, error text capping, capture streams."""
import os
import threading
import unittest

from kiln.output import TRUNCATION_MARKER, CaptureStream, Ledger, OutputRouter, cap_error_text
from kiln.wire import MAX_ERROR_BYTES, MAX_OUTPUT_BYTES, MAX_OUTPUT_RECORDS


def kept_bytes(ledger):
    return sum(len(r["text"].encode("utf-8")) for r in ledger.records())


class LedgerTest(unittest.TestCase):
    def test_exactly_the_budget_fits(self):
        ledger = Ledger()
        ledger.write("stdout", "x" * MAX_OUTPUT_BYTES)
        self.assertEqual(ledger.records(), [{"stream": "stdout", "text": "x" * MAX_OUTPUT_BYTES}])
        self.assertEqual(ledger.truncated_bytes, 0)

    def test_one_byte_past_the_budget(self):
        ledger = Ledger()
        ledger.write("stdout", "x" * (MAX_OUTPUT_BYTES + 1))
        self.assertEqual(kept_bytes(ledger), MAX_OUTPUT_BYTES)
        self.assertEqual(ledger.truncated_bytes, 1)

    def test_budget_spans_records_and_writes(self):
        ledger = Ledger()
        ledger.write("stdout", "x" * (MAX_OUTPUT_BYTES - 1))
        ledger.write("result", "yz")
        self.assertEqual(ledger.records()[-1], {"stream": "result", "text": "y"})
        self.assertEqual(ledger.truncated_bytes, 1)

    def test_same_stream_writes_merge(self):
        ledger = Ledger()
        for stream, text in [("stdout", "a"), ("stdout", "b"), ("stderr", "c"), ("stdout", "d"),
                             ("stdout", ""), ("stdout", "e")]:
            ledger.write(stream, text)
        self.assertEqual(ledger.records(), [{"stream": "stdout", "text": "ab"},
                                            {"stream": "stderr", "text": "c"},
                                            {"stream": "stdout", "text": "de"}])

    def test_record_limit(self):
        ledger = Ledger()
        streams = ["stdout", "stderr"]
        for i in range(MAX_OUTPUT_RECORDS):
            ledger.write(streams[i % 2], "x")
        self.assertEqual(len(ledger.records()), MAX_OUTPUT_RECORDS)
        self.assertEqual(ledger.truncated_bytes, 0)
        ledger.write(streams[MAX_OUTPUT_RECORDS % 2], "hello")  # would be record 257
        self.assertEqual(len(ledger.records()), MAX_OUTPUT_RECORDS)
        self.assertEqual(ledger.truncated_bytes, 5)

    def test_a_display_takes_its_place_among_the_records(self):
        ledger = Ledger()
        ledger.write("stdout", "a")
        ledger.display()
        ledger.display()
        ledger.write("stdout", "b")
        ledger.write("stderr", "e")
        self.assertEqual(ledger.records(), [{"stream": "stdout", "text": "a"}, {"stream": "display"},
                                            {"stream": "display"}, {"stream": "stdout", "text": "b"},
                                            {"stream": "stderr", "text": "e"}])

    def test_display_places_are_not_text_records(self):
        ledger = Ledger()
        for i in range(MAX_OUTPUT_RECORDS):
            ledger.write("stdout", "x")
            ledger.display()  # each text record its own, between displays
        self.assertEqual(ledger.truncated_bytes, 0)
        ledger.write("stdout", "past")  # would be text record 257
        self.assertEqual(ledger.truncated_bytes, 4)
        ledger.display()  # a display still has its place, after the kept text
        records = ledger.records()
        self.assertEqual(sum(r["stream"] == "stdout" for r in records), MAX_OUTPUT_RECORDS)
        self.assertEqual(records[-2:], [{"stream": "display"}, {"stream": "display"}])

    def test_nothing_is_kept_after_a_discard(self):
        ledger = Ledger()
        ledger.write("stdout", "x" * MAX_OUTPUT_BYTES)
        ledger.write("stdout", "y")
        ledger.write("stderr", "zz")
        ledger.write("stdout", "é")
        self.assertEqual(ledger.records(), [{"stream": "stdout", "text": "x" * MAX_OUTPUT_BYTES}])
        self.assertEqual(ledger.truncated_bytes, 1 + 2 + 2)

    def test_a_dropped_record_makes_no_gap(self):
        ledger = Ledger()
        for i in range(MAX_OUTPUT_RECORDS):
            ledger.write(["stdout", "stderr"][i % 2], "x")
        ledger.write("stdout", "dropped")  # a 257th record
        ledger.write("stdout", "also")  # merges with nothing kept
        self.assertEqual(ledger.truncated_bytes, len("dropped") + len("also"))

    def test_cut_on_a_code_point_boundary(self):
        for char in ("é", "€", "\U0001F600"):
            size = len(char.encode("utf-8"))
            for room in range(1, size):
                with self.subTest(char=char, room=room):
                    ledger = Ledger()
                    ledger.write("stdout", "x" * (MAX_OUTPUT_BYTES - room))
                    ledger.write("stdout", char + "tail")
                    self.assertEqual(ledger.records()[0]["text"], "x" * (MAX_OUTPUT_BYTES - room))
                    self.assertEqual(ledger.truncated_bytes, size + 4)
        ledger = Ledger()
        ledger.write("stdout", "x" * (MAX_OUTPUT_BYTES - 3))
        ledger.write("stdout", "aé€")
        self.assertTrue(ledger.records()[0]["text"].endswith("aé"))
        self.assertEqual(ledger.truncated_bytes, 3)

    def test_lone_surrogates_count_as_their_replacement(self):
        ledger = Ledger()
        ledger.write("stdout", "a\ud800b")
        self.assertEqual(ledger.records(), [{"stream": "stdout", "text": "a?b"}])
        ledger.write("stdout", "\udfff" * MAX_OUTPUT_BYTES)
        self.assertEqual(ledger.truncated_bytes, 3)
        self.assertEqual(kept_bytes(ledger), MAX_OUTPUT_BYTES)

    def test_huge_print_is_counted_exactly(self):
        router = OutputRouter()
        ledger = Ledger()
        router.attach(ledger)
        print("x" * 100_000_000, file=CaptureStream(router, "stdout", 1))
        self.assertEqual(ledger.truncated_bytes, 100_000_001 - MAX_OUTPUT_BYTES)
        self.assertEqual(kept_bytes(ledger), MAX_OUTPUT_BYTES)

    def test_huge_non_ascii_write_is_counted_exactly(self):
        ledger = Ledger()
        ledger.write("stdout", "é" * 1_000_001)
        self.assertEqual(ledger.truncated_bytes, 2_000_002 - MAX_OUTPUT_BYTES)
        self.assertEqual(ledger.records()[0]["text"], "é" * (MAX_OUTPUT_BYTES // 2))


class ErrorTextTest(unittest.TestCase):
    def test_short_text_is_kept(self):
        self.assertEqual(cap_error_text("boom"), "boom")
        self.assertEqual(cap_error_text("e" * MAX_ERROR_BYTES), "e" * MAX_ERROR_BYTES)
        self.assertEqual(cap_error_text("bad \ud800"), "bad ?")

    def test_long_text_is_cut_with_a_marker(self):
        for text in ("e" * (MAX_ERROR_BYTES + 1), "é" * MAX_ERROR_BYTES, "x" + "€" * 30000):
            with self.subTest(len(text)):
                capped = cap_error_text(text)
                self.assertTrue(capped.endswith(TRUNCATION_MARKER))
                size = len(capped.encode("utf-8"))
                self.assertLessEqual(size, MAX_ERROR_BYTES)
                self.assertGreater(size, MAX_ERROR_BYTES - 4)
                self.assertTrue(text.startswith(capped[:-len(TRUNCATION_MARKER)]))


class CaptureStreamTest(unittest.TestCase):
    def test_stream_protocol(self):
        stream = CaptureStream(OutputRouter(), "stderr", 2)
        self.assertEqual(stream.fileno(), 2)
        self.assertFalse(stream.isatty())
        self.assertEqual(stream.encoding, "utf-8")
        self.assertTrue(stream.writable())
        stream.flush()
        with self.assertRaises(TypeError):
            stream.write(b"bytes")

    def test_without_a_cell_text_goes_to_the_descriptor(self):
        read_fd, write_fd = os.pipe()
        try:
            stream = CaptureStream(OutputRouter(), "stdout", write_fd)
            self.assertEqual(stream.write("héllo\ud800"), 6)
            self.assertEqual(os.read(read_fd, 100), "héllo?".encode("utf-8"))
        finally:
            os.close(read_fd)
            os.close(write_fd)

    def test_attach_and_detach(self):
        router = OutputRouter()
        ledger = Ledger()
        router.attach(ledger)
        stream = CaptureStream(router, "stdout", 1)
        print("in", file=stream)
        self.assertIs(router.detach(), ledger)
        self.assertFalse(router.emit("stdout", "after"))
        self.assertEqual(ledger.records(), [{"stream": "stdout", "text": "in\n"}])

    def test_displays_are_sent_in_order_with_the_text(self):
        sent = []

        def sender(take):
            sent.extend(take()[1])
            return True

        router = OutputRouter(sender)
        ledger = Ledger()
        router.attach(ledger, "c-1")
        router.emit("stdout", "a")  # waits for its line's end
        self.assertTrue(router.show("c-1", b"frame"))
        router.emit("stdout", "b")
        router.detach()
        self.assertEqual(sent, [("stdout", "a"), ("display", b"frame"), ("stdout", "b")])
        self.assertEqual(ledger.records(), [{"stream": "stdout", "text": "a"}, {"stream": "display"},
                                            {"stream": "stdout", "text": "b"}])

    def test_a_display_of_a_cell_not_running_is_refused(self):
        router = OutputRouter(lambda take: self.fail("sent"))
        self.assertFalse(router.show("c-1", b"frame"))
        ledger = Ledger()
        router.attach(ledger, "c-2")
        self.assertFalse(router.show("c-1", b"frame"))
        self.assertEqual(ledger.records(), [])

    def test_threads_write_safely(self):
        router = OutputRouter()
        ledger = Ledger()
        router.attach(ledger)
        stream = CaptureStream(router, "stdout", 1)

        def chatter():
            for _ in range(2000):
                stream.write("abc")

        threads = [threading.Thread(target=chatter) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(kept_bytes(ledger) + ledger.truncated_bytes, 8 * 2000 * 3)
        self.assertEqual(kept_bytes(ledger), 8 * 2000 * 3)


if __name__ == "__main__":
    unittest.main()
