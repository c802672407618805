"""kiln.jsonplain: lossless JSON as JavaScript sees it, every rule at and past its edge."""

import collections
import enum
import json
import sys
import unittest

from kiln import jsonplain as J
from kiln.jsonplain import NOT_LOSSLESS, OK, OVER_BUDGET


class Int(int):
    pass


class Str(str):
    pass


class List(list):
    pass


class Dict(dict):
    pass


class Float(float):
    pass


class Color(enum.IntEnum):
    RED = 1


M = __name__ + "."


def deep_list(depth, leaf=None):
    v = [] if leaf is None else leaf
    for _ in range(depth):
        v = [v]
    return v


class NumberSpelling(unittest.TestCase):
    CASES = [
        (1.0, "1"),
        (-1.0, "-1"),
        (0.0, "0"),
        (1e-7, "1e-7"),
        (1e-6, "0.000001"),
        (1.5e-7, "1.5e-7"),
        (1e21, "1e+21"),
        (-1e21, "-1e+21"),
        (1.5e21, "1.5e+21"),
        (1e20, "100000000000000000000"),
        (123456789012345680000.0, "123456789012345683968"),  # exact digits, not String(n)'s 123456789012345680000
        (2.0**60, "1152921504606846976"),  # integral below 1e21: exact digits
        (2**60, "1152921504606846976"),
        (2**53, "9007199254740992"),
        (-(2**53), "-9007199254740992"),
        (5e-324, "5e-324"),
        (-5e-324, "-5e-324"),
        (0.1, "0.1"),
        (0.5, "0.5"),
        (123.456, "123.456"),
        (1 / 3, "0.3333333333333333"),
        (1e16, "10000000000000000"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (2.2250738585072014e-308, "2.2250738585072014e-308"),
        (100.0, "100"),
        (0.000123, "0.000123"),
        (1.2e-5, "0.000012"),
        (10**22, "10000000000000000000000"),  # an int a double holds exactly
        (2**1023, str(2**1023)),
        (True, "true"),
        (False, "false"),
        (None, "null"),
    ]

    def test_spelling(self):
        for value, want in self.CASES:
            with self.subTest(value=value):
                self.assertEqual(J.encode(value), want)
                self.assertEqual(J.measure(value), len(want))
                # the text reads back as the same double
                self.assertEqual(float(json.loads(want)) if value is not None and type(value) is not bool else json.loads(want), value)

    def test_private_rounding(self):
        import decimal

        ctx = decimal.getcontext()
        saved = ctx.prec, ctx.rounding
        try:
            ctx.prec, ctx.rounding = 3, decimal.ROUND_FLOOR
            self.assertEqual(J.encode(0.1), "0.1")
            self.assertEqual(J.encode(1 / 3), "0.3333333333333333")
        finally:
            ctx.prec, ctx.rounding = saved

    def test_integers_a_double_must_hold(self):
        self.assertEqual(J.check(2**53, 100), (OK, 16))
        self.assertEqual(J.check(-(2**53), 100)[0], OK)
        for bad in (2**53 + 1, -(2**53) - 1, 2**60 + 1, 2**1024, -(2**1024), 10**400):
            with self.subTest(bad=bad):
                status, reason = J.check(bad, 10**6)
                self.assertEqual(status, NOT_LOSSLESS)
                self.assertIn("not exactly representable", reason)
        self.assertIn("9007199254740993", J.check(2**53 + 1, 100)[1])
        # the largest double is an exact integer
        self.assertEqual(J.check(int(sys.float_info.max), 1000)[0], OK)

    def test_not_lossless_floats(self):
        for value, name in ((float("nan"), "NaN"), (float("inf"), "Infinity"), (float("-inf"), "-Infinity"), (-0.0, "-0")):
            with self.subTest(value=value):
                self.assertEqual(J.check(value, 100), (NOT_LOSSLESS, "%s at $" % name))
                with self.assertRaises(J.NotLossless):
                    J.encode(value)
        self.assertEqual(J.check([1, 2, float("nan")], 100), (NOT_LOSSLESS, "NaN at $[2]"))
        self.assertEqual(J.check({"a": {"b c": [-0.0]}}, 100), (NOT_LOSSLESS, '-0 at $.a["b c"][0]'))
        self.assertEqual(J.check(0.0, 100), (OK, 1))


class Shapes(unittest.TestCase):
    def test_not_lossless_shapes(self):
        cyc = []
        cyc.append(cyc)
        d = {}
        d["self"] = d
        cases = [
            ((1, 2), "tuple at $"),
            ({1, 2}, "set at $"),
            (frozenset([1]), "frozenset at $"),
            ({1: 0, "1": 0}, "non-string key (int) at $"),
            ({(1, 2): 0}, "non-string key (tuple) at $"),
            (cyc, "cycle at $[0]"),
            (d, "cycle at $.self"),
            ([b"x"], "value of type bytes at $[0]"),
            (object(), "value of type object at $"),
            (Int(1), M + "Int (a subclass of int) at $"),
            (Color.RED, M + "Color (a subclass of int) at $"),
            (Str("x"), M + "Str (a subclass of str) at $"),
            (Float(1.0), M + "Float (a subclass of float) at $"),
            (List([1]), M + "List (a subclass of list) at $"),
            (Dict(a=1), M + "Dict (a subclass of dict) at $"),
            (collections.OrderedDict(a=1), "collections.OrderedDict (a subclass of dict) at $"),
            (collections.defaultdict(list), "collections.defaultdict (a subclass of dict) at $"),
            ({"a": [1, (2,)]}, "tuple at $.a[1]"),
        ]
        for value, reason in cases:
            with self.subTest(reason=reason):
                self.assertEqual(J.check(value, 1000), (NOT_LOSSLESS, reason))
                self.assertEqual(J.encode_checked(value, 1000), (NOT_LOSSLESS, reason))
                with self.assertRaises(J.NotLossless) as cm:
                    J.encode(value)
                self.assertEqual(cm.exception.reason, reason)

    def test_bool_is_its_own_type(self):
        self.assertEqual(J.encode([True, False, 1, 0]), "[true,false,1,0]")

    def test_shared_but_acyclic(self):
        a = [1]
        self.assertEqual(J.encode([a, a, {"x": a}]), '[[1],[1],{"x":[1]}]')

    def test_compact_like_stringify(self):
        v = {"a": [1, 2.5, "x", None, True, {}, []], "b": {"c": "d"}}
        self.assertEqual(J.encode(v), json.dumps(v, separators=(",", ":"), ensure_ascii=False))


class Strings(unittest.TestCase):
    def test_escapes_as_stringify(self):
        s = 'a"\\/\b\f\n\r\t\x00\x1f\x7f\u2028\u2029é😀'
        self.assertEqual(J.encode(s), '"a\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u001f\x7f\u2028\u2029é😀"')

    def test_utf8_size(self):
        self.assertEqual(J.measure("é"), 4)
        self.assertEqual(J.check("é", 4), (OK, 4))
        self.assertEqual(J.check("é", 3), (OVER_BUDGET, None))
        self.assertEqual(J.check("éx", 4), (OVER_BUDGET, None))
        self.assertEqual(J.check("éx", 5), (OK, 5))
        self.assertEqual(J.measure("😀"), 6)

    def test_lone_surrogates(self):
        self.assertEqual(J.encode("\ud800"), '"\\ud800"')
        self.assertEqual(J.encode("a\udfffb"), '"a\\udfffb"')
        self.assertEqual(J.measure("\ud800"), 2 + 6)
        self.assertEqual(J.check("\ud800", 8), (OK, 8))
        self.assertEqual(J.check("\ud800", 7), (OVER_BUDGET, None))
        # a pair spelled as two code points is the one character JavaScript sees
        self.assertEqual(J.encode("\ud83d\ude00"), '"😀"')
        self.assertEqual(J.measure("\ud83d\ude00"), 6)
        # reversed, they are two lone surrogates
        self.assertEqual(J.encode("\ude00\ud83d"), '"\\ude00\\ud83d"')
        # the text is valid UTF-8
        J.encode(["\ud800", {"\udc00": "\ud83d"}]).encode("utf-8")

    def test_keys_colliding_after_folding(self):
        status, reason = J.check({"\ud83d\ude00": 1, "😀": 2}, 100)
        self.assertEqual(status, NOT_LOSSLESS)
        self.assertIn("collide", reason)
        self.assertEqual(J.encode({"\ud800": 1, "\udc00": 2}), '{"\\ud800":1,"\\udc00":2}')

    def test_flat_string_list(self):
        v = ["a", "é", 'q"'] * 10
        self.assertEqual(J.encode(v), json.dumps(v, separators=(",", ":"), ensure_ascii=False))
        v = ["a"] * 10 + ["\ud800"]
        self.assertEqual(J.encode(v), "[" + ",".join(['"a"'] * 10 + ['"\\ud800"']) + "]")


class KeyOrder(unittest.TestCase):
    def test_object_keys_order(self):
        v = {"b": 1, "a": 2, "10": 3, "2": 4, "01": 5, "4294967294": 6, "4294967295": 7, "-1": 8, "0": 9, "1.5": 10, "٣": 11}
        self.assertEqual(
            J.encode(v),
            '{"0":9,"2":4,"10":3,"4294967294":6,"b":1,"a":2,"01":5,"4294967295":7,"-1":8,"1.5":10,"٣":11}',
        )

    def test_insertion_order_kept(self):
        self.assertEqual(J.encode({"z": 1, "y": 2, "x": 3}), '{"z":1,"y":2,"x":3}')


class Budget(unittest.TestCase):
    def test_exact_size(self):
        v = {"a": [1, 2.5, "xé", None, True, False, {"\ud800": []}], "0": 1e21}
        text = J.encode(v)
        n = len(text.encode("utf-8"))
        self.assertEqual(J.measure(v), n)
        self.assertEqual(J.check(v, n), (OK, n))
        self.assertEqual(J.check(v, n - 1), (OVER_BUDGET, None))
        self.assertEqual(J.encode_checked(v, n), (OK, text))
        self.assertEqual(J.encode_checked(v, n - 1), (OVER_BUDGET, None))

    def test_over_budget_wins_whatever_the_order(self):
        big = "x" * 100
        for v in ([float("nan"), big], [big, float("nan")], {"a": (1,), "b": big}, {"b": big, "a": {1, 2}},
                  [{1: 2}, big], [2**53 + 1, big], [Str("s"), big]):
            with self.subTest(v=repr(v)[:40]):
                self.assertEqual(J.check(v, 50), (OVER_BUDGET, None))
                self.assertEqual(J.encode_checked(v, 50), (OVER_BUDGET, None))
                self.assertEqual(J.check(v, 10**6)[0], NOT_LOSSLESS)

    def test_a_cycle_is_not_lossless_within_budget(self):
        a = []
        a.append(a)
        self.assertEqual(J.check(a, 100), (NOT_LOSSLESS, "cycle at $[0]"))

    def test_early_rejection(self):
        # An array is refused from its length alone, an object from its count:
        # neither is walked. A list of a million objects is not even looked at.
        class Boom:
            pass

        v = [Boom()] * 1_000_000
        self.assertEqual(J.check(v, 999_999), (OVER_BUDGET, None))
        d = {str(i): i for i in range(1000)}
        self.assertGreater(J.measure(d, 100), 100)
        self.assertEqual(J.check(d, 4000), (OVER_BUDGET, None))

    def test_fast_paths_agree(self):
        for v in ([0] * 50, list(range(-20, 20)), [0.5, 1.0, 1e21] * 5, ["a", "b"] * 9,
                  [1, 2, 3, 4, 5, 6, 7, 2**60], [1.0] * 8 + [float("nan")]):
            with self.subTest(v=repr(v)[:30]):
                slow = "[" + ",".join(J.encode(x) for x in v) + "]" if all(
                    J.check(x, 100)[0] == OK for x in v) else None
                if slow is None:
                    self.assertEqual(J.check(v, 10**6)[0], NOT_LOSSLESS)
                else:
                    self.assertEqual(J.encode(v), slow)
                    self.assertEqual(J.measure(v), len(slow.encode()))

    def test_large_flat_list(self):
        v = [0] * 6_000_000
        self.assertEqual(J.check(v, 32768), (OVER_BUDGET, None))
        status, text = J.encode_checked(v, 12_000_001)
        self.assertEqual(status, OK)
        self.assertEqual(len(text), 12_000_001)
        self.assertEqual(J.check(v, 12_000_000), (OVER_BUDGET, None))


class Depth(unittest.TestCase):
    def test_million_deep_list(self):
        v = deep_list(1_000_000)
        text = J.encode(v)
        self.assertEqual(len(text), 2_000_002)
        self.assertEqual(text[:3], "[[[")
        self.assertEqual(J.check(v, 2_000_002), (OK, 2_000_002))
        self.assertEqual(J.check(v, 2_000_001), (OVER_BUDGET, None))
        # the decoder reads it back without recursion
        back = J.loads(text)
        for _ in range(1_000_000):
            self.assertEqual(len(back), 1)
            back = back[0]
        self.assertEqual(back, [])

    def test_deep_reason_path(self):
        v = deep_list(3, leaf=[float("nan")])
        self.assertEqual(J.check(v, 100), (NOT_LOSSLESS, "NaN at $[0][0][0][0]"))


class Decode(unittest.TestCase):
    def test_strict(self):
        for bad in ("", " ", "NaN", "Infinity", "-Infinity", "[NaN]", "01", "1.", ".5", "+1", "[1,]", "{\"a\":1,}",
                    "{'a':1}", '"\x01"', "[1] x", "tru", "[", "{", '{"a"}', '{"a":}', "\ufeff1", "[1 2]", '"\\x"',
                    "{1:2}", "--1", "1e", "\u00a01"):
            with self.subTest(bad=bad):
                with self.assertRaises(J.DecodeError):
                    J.loads(bad)
        with self.assertRaises(J.DecodeError):
            J.loads_bytes(b'"\xff"')

    def test_strict_without_the_json_package(self):
        # A fresh interpreter that never imported json, as the program child:
        # _json (3.10, 3.11) needs json.decoder to raise its errors.
        import os
        import subprocess

        code = (
            "import sys\n"
            "from kiln import jsonplain as J\n"
            "out = []\n"
            "for bad in ['{\"a\":1,{', '[1 2]', '\"\\\\x\"', '[\"\\x01\"]', '\"abc', '{\"a\" 1}', '[1,]']:\n"
            "    for f in (J.loads, lambda t: J.loads_bytes(t.encode())):\n"
            "        try:\n"
            "            f(bad)\n"
            "        except BaseException as e:\n"
            "            out.append(type(e).__name__)\n"
            "print(' '.join(out))\n"
        )
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        result = subprocess.run([sys.executable, "-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1])\n" + code, here],
                                capture_output=True, text=True, check=True)
        self.assertEqual(result.stdout.split(), ["DecodeError"] * 14, result.stderr)

    def test_values(self):
        self.assertEqual(J.loads(' {"a" : [1, 2.5, -0, 1e2, true, false, null, "x\\n\\u00e9"] } '),
                         {"a": [1, 2.5, 0, 100.0, True, False, None, "x\né"]})
        self.assertIs(type(J.loads("1")), int)
        self.assertIs(type(J.loads("1.0")), float)
        self.assertEqual(J.loads("1152921504606846976"), 2**60)
        self.assertEqual(J.loads('"\\ud83d\\ude00"'), "😀")
        self.assertEqual(J.loads('"\\ud800"'), "\ud800")
        self.assertEqual(J.loads_bytes('"é"'.encode()), "é")

    def test_duplicate_keys_last_wins_first_place(self):
        for text in ('{"a":1,"b":2,"a":3}', "[" * 300 + '{"a":1,"b":2,"a":3}' + "]" * 300):
            v = J.loads(text)
            while type(v) is list:
                v = v[0]
            self.assertEqual(v, {"a": 3, "b": 2})
            self.assertEqual(list(v), ["a", "b"])

    def test_deep_decode(self):
        for depth in (12_000, 100_000):
            text = "[" * depth + '{"k":' * 3 + "1" + "}" * 3 + "]" * depth
            v = J.loads(text)
            for _ in range(depth):
                v = v[0]
            self.assertEqual(v, {"k": {"k": {"k": 1}}})
            self.assertEqual(J.encode(J.loads(text)), text)
        deep_obj = '{"a":' * 12_000 + "null" + "}" * 12_000
        self.assertEqual(J.encode(J.loads(deep_obj)), deep_obj)

    def test_deep_decode_under_a_raised_recursion_limit(self):
        saved = sys.getrecursionlimit()
        sys.setrecursionlimit(1_000_000)  # as a program may; the C scanner must not be let loose
        try:
            v = J.loads("[" * 200_000 + "]" * 200_000)
        finally:
            sys.setrecursionlimit(saved)
        self.assertEqual(J.measure(v), 400_000)

    def test_both_paths_agree(self):
        samples = ['{"a":[1,{"b":null}],"c":"\\u0000"}', "[]", "{}", '"x"', "-0.5e-3", "[[[[1]]]]"]
        for s in samples:
            self.assertEqual(J._loads_iterative(s), json.loads(s))
            self.assertEqual(J.loads(s), json.loads(s))


class Hardening(unittest.TestCase):
    def test_rebound_builtins_do_not_reach_the_codec(self):
        import builtins

        saved = {k: getattr(builtins, k) for k in ("len", "isinstance", "type", "str", "int", "list", "id", "set")}
        try:
            for k in saved:
                setattr(builtins, k, None)
            text = J.encode({"a": [1, 2.5, "é", [0] * 10]})
            back = J.loads(text)
        finally:
            for k, v in saved.items():
                setattr(builtins, k, v)
        self.assertEqual(text, '{"a":[1,2.5,"é",[0,0,0,0,0,0,0,0,0,0]]}')
        self.assertEqual(back, {"a": [1, 2.5, "é", [0] * 10]})


if __name__ == "__main__":
    unittest.main()
