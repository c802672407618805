"""kiln.display: MIME bundles by IPython's conventions, and the per-cell display bounds."""
import base64
import unittest

from kiln import wire
from kiln.display import MAX_DISPLAY_BYTES, MAX_DISPLAY_ITEMS, Displays, bundle, rich

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


class Reprs:
    def __repr__(self):
        return "Reprs()"

    def _repr_png_(self):
        return PNG

    def _repr_html_(self):
        return "<b>x</b>"

    def _repr_json_(self):
        return {"a": [1, 2]}

    def _repr_latex_(self):
        return None  # nothing to say in LaTeX


class Bundled:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/markdown": "*m*", "application/x-unknown": "dropped",
                "text/plain": "ignored", "image/jpeg": "not base64!"}, {}

    def _repr_html_(self):
        return "<i>h</i>"


class BundleTest(unittest.TestCase):
    def test_repr_methods(self):
        data = bundle(Reprs())
        self.assertEqual(data, {"text/plain": "Reprs()", "image/png": base64.b64encode(PNG).decode(),
                                "text/html": "<b>x</b>", "application/json": '{"a": [1, 2]}'})
        self.assertTrue(rich(data))

    def test_mimebundle_keeps_known_types_and_adds_methods(self):
        data = bundle(Bundled())
        self.assertEqual(data["text/markdown"], "*m*")
        self.assertEqual(data["text/html"], "<i>h</i>")
        self.assertNotIn("application/x-unknown", data)
        self.assertNotIn("image/jpeg", data)  # invalid base64 is not carried
        self.assertTrue(data["text/plain"].startswith("<"))  # text/plain is always the repr

    def test_plain_object(self):
        data = bundle(42)
        self.assertEqual(data, {"text/plain": "42"})
        self.assertFalse(rich(data))

    def test_a_class_is_not_asked_for_its_reprs(self):
        self.assertEqual(bundle(Reprs), {"text/plain": repr(Reprs)})

    def test_values_the_host_refuses_are_left_out(self):
        class Odd:
            def __repr__(self):
                return "odd\udc00"

            def _repr_png_(self):
                return "AB=="  # trailing bits set: a lenient decoder's, not the host's

            def _repr_jpeg_(self):
                return "AA=="

            def _repr_html_(self):
                return "<b>\ud800</b>"

            def _repr_json_(self):
                return '{"a": 1, "a": 2}'

        data = bundle(Odd())
        self.assertEqual(data, {"text/plain": "odd\ufffd", "image/jpeg": "AA==", "text/html": "<b>\ufffd</b>"})
        wire._display_data(data, "/data")
        for text, kept in (("[1, 2]", True), ("[1, NaN]", False), ("1 2", False), ('"\\ud800"', False)):
            with self.subTest(text):
                got = bundle(type("J", (), {"_repr_json_": lambda self, t=text: t})())
                self.assertEqual("application/json" in got, kept)

    def test_standard_base64_as_the_host_reads_it(self):
        for text, want in (("", True), ("AA==", True), ("AB==", False), ("AAE=", True), ("AAF=", False),
                           ("AAAA", True), ("AAA", False), ("AA==\n", True), ("A\r\nA==", True),
                           ("AA=\x00", False), ("é", False), ("AA==AA==", False)):
            with self.subTest(text):
                self.assertEqual(wire.standard_base64(text), want)

    def test_every_bundle_passes_the_wire_check(self):
        for obj in (Reprs(), Bundled(), 1):
            wire._display_data(bundle(obj), "/data")


class Sent:
    """Stands in for the worker: a frame is (data, dropped), made when fits(data)."""

    def __init__(self, fits=lambda data: True, running=True):
        self.sent, self.spilled, self.encoded = [], [], 0
        self._fits, self._running = fits, running

    def encode(self, data, dropped):
        self.encoded += 1
        return (data, dropped) if self._fits(data) else None

    def send(self, frame):
        if self._running:
            self.sent.append(frame)
        return self._running

    def displays(self):
        return Displays(self.encode, self.send, self.spilled.append)


class BoundsTest(unittest.TestCase):
    def test_items_at_the_limit_and_one_past(self):
        s = Sent()
        d = s.displays()
        for i in range(MAX_DISPLAY_ITEMS + 1):
            d.show({"text/plain": str(i), "text/html": "<p/>"})
        self.assertEqual(len(s.sent), MAX_DISPLAY_ITEMS)
        self.assertEqual(len(s.spilled), 1)
        self.assertIn(str(MAX_DISPLAY_ITEMS), s.spilled[0])

    def test_bytes_at_the_limit_and_one_past(self):
        s = Sent()
        d = s.displays()
        d.show({"text/plain": "a", "text/html": "x" * (MAX_DISPLAY_BYTES - 1001)})
        d.show({"text/plain": "b", "text/html": "y" * 999})  # exactly at the limit
        self.assertEqual(s.sent[-1][1], 0)
        self.assertEqual(d.size, MAX_DISPLAY_BYTES)
        d = s.displays()
        d.show({"text/plain": "a", "text/html": "x" * (MAX_DISPLAY_BYTES - 1001)})
        d.show({"text/plain": "b", "text/html": "y" * 1000})  # one byte past
        data, dropped = s.sent[-1]
        self.assertEqual(dropped, 1)
        self.assertEqual(list(data), ["text/plain"])
        self.assertIn("text/html dropped", data["text/plain"])

    def test_an_item_over_one_frame_keeps_its_text(self):
        s = Sent(fits=lambda data: "image/png" not in data)
        s.displays().show({"text/plain": "p", "image/png": "AAAA"})
        self.assertEqual(s.sent[0][1], 1)
        self.assertTrue(s.sent[0][0]["text/plain"].startswith("p\n[display: image/png dropped"))

    def test_each_display_is_encoded_once(self):
        s = Sent()
        d = s.displays()
        for i in range(3):
            d.show({"text/plain": str(i), "image/png": "AAAA"})
        self.assertEqual((s.encoded, len(s.sent)), (3, 3))

    def test_a_display_after_its_cell_ended_goes_to_stdout(self):
        s = Sent(running=False)
        s.displays().show({"text/plain": "late", "text/html": "<p/>"})
        self.assertEqual((s.sent, s.spilled), ([], ["late\n"]))

    def test_a_text_over_one_frame_is_spilled(self):
        s = Sent(fits=lambda data: False)
        s.displays().show({"text/plain": "p", "text/html": "<p/>"})
        self.assertEqual(s.sent, [])
        self.assertEqual(len(s.spilled), 1)
        self.assertTrue(s.spilled[0].startswith("p\n[display: text/html dropped"))


class WireTest(unittest.TestCase):
    def check(self, data):
        wire._display_data(data, "/d")

    def test_refusals(self):
        for data, reason in (({"text/plain": "x", "image/png": "!!"}, "value"),
                             ({"text/plain": "x", "a/b": "y"}, "unknown"),
                             ({"text/html": "x"}, "missing"),
                             ({"text/plain": 1}, "type"),
                             ([], "type")):
            with self.assertRaises(wire.DecodeError) as cm:
                self.check(data)
            self.assertEqual(cm.exception.reason, reason, data)


class MatplotlibHookTest(unittest.TestCase):
    def test_installed_once_and_other_imports_unchanged(self):
        import sys
        from kiln import display
        before = list(sys.meta_path)
        try:
            display.use_matplotlib_backend()
            display.use_matplotlib_backend()
            hooks = [f for f in sys.meta_path if isinstance(f, display._MatplotlibFinder)]
            self.assertEqual(len(hooks), 1)
            with self.assertRaises(ModuleNotFoundError):
                __import__("kiln_no_such_module")
        finally:
            sys.meta_path[:] = before


if __name__ == "__main__":
    unittest.main()
