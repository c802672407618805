"""Lossless JSON for the program child: values as JavaScript sees them.

The fd-3 channel carries JSON exactly as JSON.parse and JSON.stringify see it
(docs/programs.md, "Values"). This module is the child's side:

- encode / encode_checked / check / measure write or meter a Python value as
  the compact text JSON.stringify would produce for the same JavaScript value,
  and refuse what would not survive the trip ("not lossless");
- loads / loads_bytes read the host's frames.

Nothing here recurses: every walk keeps its own stack, so nesting depth is
bounded by memory alone.

What is lossless: None, bool, int, float, str, list and dict with str keys,
each of exactly that type (a subclass is refused, bool being its own type);
ints a double holds exactly (|n| <= 2**53, or beyond when the double is exact:
2**60 yes, 2**53 + 1 no); floats other than NaN, the infinities and -0.0; no
tuple, set or cycle; no two keys of one dict that JavaScript would see as one
string (a Python str may spell a surrogate pair as two code points, which
JavaScript folds into one character).

Spelling: numbers as ECMAScript's Number::toString spells them (1.0 -> 1,
1e-7, 1e+21, 5e-324, 0.1), except that an integral value below 1e21 is written
with its exact digits (2**60 -> 1152921504606846976); strings escaped as
JSON.stringify escapes them, a lone surrogate as the six bytes \\udxxx and a
surrogate pair spelled as two code points as the one character they make;
object keys in the order of Object.keys: array-index keys (the canonical
decimal spelling of 0 <= n < 2**32 - 1) first, ascending, then the rest in
insertion order.

Number spelling uses float.__repr__ (the shortest round-tripping digits, as
ECMAScript's), never the process's decimal context or any setting a program
can change.
"""

import builtins as _builtins_module

# Hardening: functions defined below look builtins up in this private snapshot,
# taken when the child imports the module, before any model code runs; a
# program that rebinds builtins.len or builtins.isinstance cannot reach them.
__builtins__ = dict(vars(_builtins_module))

import math as _math
import sys as _sys
from itertools import repeat as _repeat
from _operator import is_ as _is  # built in: operator itself is a module to load

try:
    from _json import encode_basestring as _encode_basestring
except ImportError:  # pragma: no cover - CPython always has _json
    from json.encoder import py_encode_basestring as _encode_basestring
try:
    from _json import scanstring as _scanstring
except ImportError:  # pragma: no cover
    from json.decoder import py_scanstring as _scanstring
try:
    from _json import make_scanner as _make_scanner
except ImportError:  # pragma: no cover
    _make_scanner = None

__all__ = [
    "OK",
    "OVER_BUDGET",
    "NOT_LOSSLESS",
    "NotLossless",
    "DecodeError",
    "encode",
    "encode_checked",
    "check",
    "measure",
    "string_text",
    "number_text",
    "loads",
    "loads_bytes",
]

OK = "ok"
OVER_BUDGET = "over-budget"
NOT_LOSSLESS = "not-lossless"


class NotLossless(ValueError):
    """A value holds something JSON cannot carry exactly; .reason says what and where."""

    def __init__(self, reason):
        ValueError.__init__(self, reason)
        self.reason = reason


class DecodeError(ValueError):
    """The text is not one strict JSON value."""


_MAX_SAFE = 1 << 53
_NO_LIMIT = (1 << 63) - 1
_INF = float("inf")
_str_repr_float = float.__repr__
_int_repr = int.__repr__
_copysign = _math.copysign
_getrecursionlimit = _sys.getrecursionlimit


def _pattern(name, pattern, method="match"):
    """A stand-in for the global name, which at its first call binds name to the method
    of pattern compiled, and calls that. Importing re costs a cold child more than the
    rest of its start; the patterns serve what few runs meet: lone surrogates, previews
    of odd keys, text the C scanner does not take."""
    bound = []

    def first(*args):
        if not bound:
            import re

            bound.append(getattr(re.compile(pattern), method))
            globals()[name] = bound[0]
        return bound[0](*args)

    return first


def has_surrogate(s):
    """Whether the str s holds a surrogate (U+D800 to U+DFFF): the only code points
    UTF-8 cannot encode."""
    if s.isascii():
        return False
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _digit_start(k):
    """Whether the str k starts with an ASCII digit."""
    return "0" <= k[:1] <= "9"


_SURROGATE_SPLIT = _pattern("_SURROGATE_SPLIT", "([\ud800-\udfff])", "split")
_IDENTIFIER = _pattern("_IDENTIFIER", r"[A-Za-z_$][A-Za-z0-9_$]*\Z")


# --- scalars -------------------------------------------------------------------


def _fold(s):
    """Return s with every surrogate pair spelled as two code points joined."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _escape_with_surrogates(s):
    """JSON text of s, which holds surrogates: pairs folded, lone ones escaped."""
    parts = _SURROGATE_SPLIT(_fold(s))
    out = ['"']
    for i, part in enumerate(parts):
        if i & 1:
            out.append("\\u%04x" % ord(part))
        elif part:
            out.append(_encode_basestring(part)[1:-1])
    out.append('"')
    return "".join(out)


def string_text(s):
    """Return (JSON text of the str s, its size in UTF-8 bytes)."""
    t = _encode_basestring(s)
    if t.isascii():
        return t, len(t)
    if has_surrogate(t):
        t = _escape_with_surrogates(s)
    return t, len(t.encode("utf-8"))


def _int_exact(n):
    """Whether a double holds the int n exactly."""
    if -_MAX_SAFE <= n <= _MAX_SAFE:
        return True
    b = -n if n < 0 else n
    if b.bit_length() > 1024:
        return False
    low = (b & -b).bit_length() - 1  # trailing zero bits
    return (b >> low).bit_length() <= 53


def _float_text(f):
    """ECMAScript spelling of the float f, or None if f is not lossless."""
    if f != f or f == _INF or f == -_INF:
        return None
    if f == 0.0:
        return "0" if _copysign(1.0, f) > 0 else None
    if -1e21 < f < 1e21 and f.is_integer():
        return _int_repr(int(f))  # exact digits, as the host writes them
    r = _str_repr_float(f)
    sign = ""
    if r[0] == "-":
        sign, r = "-", r[1:]
    mant, _, exp = r.partition("e")
    ip, _, fp = mant.partition(".")
    if fp == "0":
        fp = ""
    digits = ip + fp
    s = digits.lstrip("0")
    n = len(ip) + (int(exp) if exp else 0) - (len(digits) - len(s))
    s = s.rstrip("0")
    k = len(s)
    # ECMAScript Number::toString: s * 10**(n - k), k as small as possible.
    if k <= n <= 21:
        return sign + s + "0" * (n - k)
    if 0 < n <= 21:
        return sign + s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + s
    e = n - 1
    es = ("+" if e >= 0 else "-") + _int_repr(e if e >= 0 else -e)
    if k == 1:
        return sign + s + "e" + es
    return sign + s[0] + "." + s[1:] + "e" + es


def number_text(x):
    """Spell an int or float as encode does, or raise NotLossless."""
    if type(x) is int:
        if _int_exact(x):
            return _int_repr(x)
    elif type(x) is float:
        t = _float_text(x)
        if t is not None:
            return t
    raise NotLossless("%s is not a lossless number" % _describe_number(x))


def _describe_number(x):
    if type(x) is float or isinstance(x, float):
        f = float.__float__(x)
        if f != f:
            return "NaN"
        if f == _INF:
            return "Infinity"
        if f == -_INF:
            return "-Infinity"
        if f == 0.0:
            return "-0"
        return _str_repr_float(f)
    if isinstance(x, int):
        n = int.__index__(x)
        if n.bit_length() <= 64:
            return "integer %s" % _int_repr(n)
        return "integer of %d bits" % n.bit_length()
    return type(x).__name__


def _int_size_estimate(n):
    """A lower bound on the digits of an int too large to spell cheaply."""
    if n.bit_length() <= 64:
        return len(_int_repr(n))
    return int((n.bit_length() - 1) * 0.30102999566398) + (1 if n < 0 else 0)


# --- objects -------------------------------------------------------------------


def _is_index(k):
    """Whether the str k is an array index: canonical decimal 0 .. 2**32 - 2."""
    if not (k.isascii() and k.isdigit()):
        return False
    if k[0] == "0":
        return k == "0"
    return len(k) < 10 or (len(k) == 10 and k <= "4294967294")


def _index_order(item):
    k = item[0]
    return (len(k), k)


def _object_items(d):
    """The members of the dict d as (key, value) pairs in Object.keys order, and
    what makes them not lossless, if anything (None if they are)."""
    items = list(dict.items(d))
    if not items:
        return items, None
    keys = [p[0] for p in items]
    if not all(map(_is, map(type, keys), _repeat(str))):
        for k in keys:
            if type(k) is not str:
                return items, "non-string key (%s)" % _type_name(k)
    problem = None
    if any(map(has_surrogate, keys)):
        folded = [_fold(k) for k in keys]
        if len(set(folded)) != len(folded):
            seen = set()
            for k in folded:
                if k in seen:
                    problem = "keys collide once surrogate pairs are folded (%s)" % _key_preview(k)
                    break
                seen.add(k)
    if any(map(_digit_start, keys)):
        index = [p for p in items if _is_index(p[0])]
        if index:
            rest = [p for p in items if not _is_index(p[0])]
            index.sort(key=_index_order)
            items = index + rest
    return items, problem


def _key_preview(k):
    if len(k) > 40:
        k = k[:40] + "…"
    return string_text(k)[0]


def _type_name(x):
    t = type(x)
    try:
        mod = type.__dict__["__module__"].__get__(t)
        name = type.__dict__["__qualname__"].__get__(t)
    except Exception:
        return "?"
    if type(mod) is str and mod not in ("builtins", "__main__"):
        return "%s.%s" % (mod, name)
    return name if type(name) is str else "?"


_BASES = ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (list, "list"), (dict, "dict"))

# --- the walk --------------------------------------------------------------------

_LIST, _DICT, _SEQ = 0, 1, 2  # frame kinds: list, dict, not-lossless sequence


def _path(frames):
    """JavaScript-style path ($, $[2], $.name, $["a b"]) to the value being
    visited, the last element each frame's iterator gave."""
    out = ["$"]
    for it, kind, _ in frames:
        seq, i = _iter_position(it)
        if kind == _DICT:
            k = seq[i][0]
            if type(k) is str:
                if _IDENTIFIER(k) is not None and len(k) <= 40:
                    out.append("." + k)
                else:
                    out.append("[" + _key_preview(k) + "]")
            else:
                out.append("[?]")
        else:
            out.append("[%d]" % i)
    return "".join(out)


def _iter_position(it):
    """The sequence a list iterator walks and the index it gave last."""
    _, args, *rest = it.__reduce__()
    return args[0], rest[0] - 1


_JOIN_CHUNK = 1 << 16  # elements a piece of a long list is joined from


def _join_map(fn, v):
    """",".join(map(fn, v)), a piece at a time: join makes a list of every part first,
    which for millions of small numbers is many times the text (a string each)."""
    if len(v) <= _JOIN_CHUNK:
        return ",".join(map(fn, v))
    return ",".join([",".join(map(fn, v[i:i + _JOIN_CHUNK])) for i in range(0, len(v), _JOIN_CHUNK)])


def _flat_list(v):
    """Fast path for a list of one scalar type: (text of the elements without
    brackets, size) or None when the general walk must take it."""
    first = type(v[0])
    if first is int:
        if not all(map(_is, map(type, v), _repeat(int))):
            return None
        if not (-_MAX_SAFE <= min(v) and max(v) <= _MAX_SAFE):
            return None
        t = _join_map(_int_repr, v)
        return t, len(t)
    if first is str:
        if not all(map(_is, map(type, v), _repeat(str))):
            return None
        t = _join_map(_encode_basestring, v)
        if t.isascii():
            return t, len(t)
        if has_surrogate(t):
            return None
        return t, len(t.encode("utf-8"))
    if first is float:
        if not all(map(_is, map(type, v), _repeat(float))):
            return None
        parts = list(map(_float_text, v))
        if None in parts:
            return None
        t = ",".join(parts)
        return t, len(t)
    return None


_END = object()


def _walk(value, limit, emit, stop_on_lossy):
    """Meter (and if emit, write) value. Returns (status, size, reason, text).

    status is OVER_BUDGET as soon as the bytes counted plus the fewest the rest
    could take pass limit (size is then some number above limit), else
    NOT_LOSSLESS if anything was not lossless (reason says what and where), else
    OK with text the JSON (when emit). Being over budget wins wherever the
    not-lossless part lies, unless stop_on_lossy asks to stop at the first one.
    """
    out = []
    put = out.append
    n = 0  # bytes counted
    need = 1  # the fewest bytes the values not yet reached can take
    reason = None
    frames = []  # (iterator, kind, id) of each open container, innermost last
    on_path = set()  # ids of the open containers: meeting one again is a cycle
    it = None  # the innermost frame, unpacked
    kind = _LIST
    vid = 0
    first = True  # the next element is its container's first
    v = value
    while True:
        # ---- visit v ----
        need -= 1
        t = type(v)
        bad = None
        pushed = False
        if t is str:
            if n + len(v) + 2 + need > limit:
                return OVER_BUDGET, n + len(v) + 2 + need, reason, None
            txt, size = string_text(v)
            n += size
            if emit:
                put(txt)
        elif t is int:
            if -_MAX_SAFE <= v <= _MAX_SAFE or _int_exact(v):
                txt = _int_repr(v)
                n += len(txt)
                if emit:
                    put(txt)
            else:
                bad = "%s is not exactly representable as a double" % _describe_number(v)
                n += _int_size_estimate(v)
        elif t is float:
            txt = _float_text(v)
            if txt is None:
                bad = _describe_number(v)
                n += 1 if v == 0.0 else 4  # JSON.stringify: 0 or null
            else:
                n += len(txt)
                if emit:
                    put(txt)
        elif v is None:
            n += 4
            if emit:
                put("null")
        elif t is bool:
            if v:
                n += 4
                if emit:
                    put("true")
            else:
                n += 5
                if emit:
                    put("false")
        elif t is list:
            count = len(v)
            if count == 0:
                n += 2
                if emit:
                    put("[]")
            elif id(v) in on_path:
                bad = "cycle"
                n += 1
            else:
                n += count + 1  # brackets and commas
                need += count
                if n + need > limit:
                    return OVER_BUDGET, n + need, reason, None
                flat = _flat_list(v) if count >= 8 else None
                if flat is not None:
                    n += flat[1] - (count - 1)
                    need -= count
                    if emit:
                        put("[")
                        put(flat[0])
                        put("]")
                else:
                    if emit:
                        put("[")
                    if it is not None:
                        frames.append((it, kind, vid))
                    it, kind, vid = iter(v), _LIST, id(v)
                    on_path.add(vid)
                    first = pushed = True
        elif t is dict:
            count = len(v)
            if count == 0:
                n += 2
                if emit:
                    put("{}")
            elif id(v) in on_path:
                bad = "cycle"
                n += 1
            else:
                n += 2 * count + 1  # braces, commas, colons
                need += 3 * count  # each member at least "": and one byte
                if n + need > limit:
                    return OVER_BUDGET, n + need, reason, None
                items, problem = _object_items(v)
                if problem is not None:
                    bad = problem
                elif emit:
                    put("{")
                if it is not None:
                    frames.append((it, kind, vid))
                it, kind, vid = iter(items), _DICT, id(v)
                on_path.add(vid)
                first = pushed = True
        else:
            # Not lossless. Meter it as JSON.stringify-like text anyway, so
            # that an over-budget value is over budget whatever it holds.
            elems = None
            as_dict = False
            if isinstance(v, (tuple, list, set, frozenset)):
                if isinstance(v, tuple):
                    bad = "tuple" if t is tuple else "%s (a tuple subclass)" % _type_name(v)
                    elems = list(tuple.__iter__(v))
                elif isinstance(v, list):
                    bad = "%s (a subclass of list)" % _type_name(v)
                    elems = list.copy(v)
                elif isinstance(v, set):
                    bad = "set" if t is set else "%s (a set subclass)" % _type_name(v)
                    elems = list(set.__iter__(v))
                else:
                    bad = "frozenset" if t is frozenset else "%s (a frozenset subclass)" % _type_name(v)
                    elems = list(frozenset.__iter__(v))
            elif isinstance(v, dict):
                bad = "%s (a subclass of dict)" % _type_name(v)
                elems = list(dict.items(v))
                as_dict = True
            else:
                for base, base_name in _BASES:
                    if isinstance(v, base):
                        bad = "%s (a subclass of %s)" % (_type_name(v), base_name)
                        if base is str:
                            n += len(str.__str__(v)) + 2
                        elif base is int:
                            n += _int_size_estimate(int.__index__(v))
                        elif base is float:
                            n += len(_float_text(float.__float__(v)) or "null")
                        else:
                            n += 1
                        break
                else:
                    bad = "value of type %s" % _type_name(v)
                    n += 1
            if elems is not None:
                if not elems:
                    n += 2
                elif id(v) in on_path:
                    bad = "cycle"
                    n += 1
                else:
                    c = len(elems)
                    if as_dict:
                        n += 2 * c + 1
                        need += 3 * c
                    else:
                        n += c + 1
                        need += c
                    if it is not None:
                        frames.append((it, kind, vid))
                    it, kind, vid = iter(elems), (_DICT if as_dict else _SEQ), id(v)
                    on_path.add(vid)
                    first = pushed = True
        if bad is not None and reason is None:
            # the path of v: if v's own frame is open already, its parent's
            if pushed:
                where = _path(frames)
            else:
                where = _path(frames + [(it, kind, vid)] if it is not None else frames)
            reason = "%s at %s" % (bad, where)
            if stop_on_lossy:
                return NOT_LOSSLESS, n, reason, None
            emit = False
            out = None
        if n + need > limit:
            return OVER_BUDGET, n + need, reason, None
        # ---- advance to the next value ----
        while it is not None:
            v = next(it, _END)
            if v is not _END:
                if kind == _DICT:
                    k, v = v
                    need -= 2  # the key's quotes, counted as "need" before
                    if type(k) is str:
                        if n + len(k) + 2 + need > limit:
                            return OVER_BUDGET, n + len(k) + 2 + need, reason, None
                        ktxt, ksize = string_text(k)
                    else:
                        if reason is None:
                            reason = "non-string key (%s) at %s" % (_type_name(k), _path(frames + [(it, kind, vid)]))
                            if stop_on_lossy:
                                return NOT_LOSSLESS, n, reason, None
                            emit = False
                            out = None
                        ktxt, ksize = None, 2
                    n += ksize
                    if emit:
                        if not first:
                            put(",")
                        put(ktxt)
                        put(":")
                elif emit and not first:
                    put(",")
                first = False
                break
            on_path.discard(vid)
            if emit:
                put("}" if kind == _DICT else "]")
            if frames:
                it, kind, vid = frames.pop()
            else:
                it = None
            first = False
        else:
            break
    if n > limit:
        return OVER_BUDGET, n, reason, None
    if reason is not None:
        return NOT_LOSSLESS, n, reason, None
    return OK, n, None, "".join(out) if emit else None


def encode(value):
    """Return the compact JSON text of value, or raise NotLossless."""
    t = type(value)
    if t is int and -_MAX_SAFE <= value <= _MAX_SAFE:  # the walk's answer, sooner
        return _int_repr(value)
    if t is str:
        return string_text(value)[0]
    if value is None:
        return "null"
    status, _, reason, text = _walk(value, _NO_LIMIT, True, True)
    if status != OK:
        raise NotLossless(reason)
    return text


def encode_checked(value, budget):
    """One walk: (OK, text) if value is lossless and its text fits budget
    bytes, (OVER_BUDGET, None) if it does not fit (whatever else is wrong with
    it), else (NOT_LOSSLESS, reason)."""
    status, _, reason, text = _walk(value, budget, True, False)
    if status == OK:
        return OK, text
    if status == OVER_BUDGET:
        return OVER_BUDGET, None
    return NOT_LOSSLESS, reason


def check(value, budget):
    """Like encode_checked without writing the text: (OK, size),
    (OVER_BUDGET, None) or (NOT_LOSSLESS, reason)."""
    status, size, reason, _ = _walk(value, budget, False, False)
    if status == OK:
        return OK, size
    if status == OVER_BUDGET:
        return OVER_BUDGET, None
    return NOT_LOSSLESS, reason


def measure(value, budget=None):
    """The size in bytes of value's compact JSON text, or once that is sure
    to pass budget, some number above budget. Parts that are not lossless are
    metered as JSON.stringify-like text."""
    limit = _NO_LIMIT if budget is None else budget
    return _walk(value, limit, False, False)[1]


# --- decoding ----------------------------------------------------------------------

_WS = _pattern("_WS", r"[ \t\n\r]*")
_NUMBER = _pattern("_NUMBER", r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def _reject_constant(name):
    raise DecodeError("%s is not JSON" % name)


class _Context:
    """What the C scanner reads its hooks from."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_reject_constant)
    memo = None


_fast_scan = _make_scanner(_Context()) if _make_scanner is not None else None
_FAST_MAX_BRACKETS = 200
_FAST_MAX_RECURSION_LIMIT = 4000


def loads(s):
    """Decode one strict JSON value from the str s, iteratively.

    Duplicate keys: the last value wins, at the first key's place (as
    JSON.parse). Integer tokens become int, others float. Raises DecodeError.
    """
    if type(s) is not str:
        raise TypeError("loads wants a str")
    try:
        return _loads(s)
    except SystemError:
        pass
    # CPython 3.10 and 3.11: _json reports malformed text by raising
    # json.decoder.JSONDecodeError, which it looks up in sys.modules, and
    # fails with SystemError when that module was never imported (as in the
    # program child, which does without it). Import it, once, and decode again
    # for the real error.
    try:
        import json.decoder  # noqa: F401
    except Exception:
        pass
    try:
        return _loads(s)
    except SystemError:
        raise DecodeError("invalid JSON") from None


def _loads(s):
    if _fast_scan is not None and (
        _getrecursionlimit() <= _FAST_MAX_RECURSION_LIMIT
        or s.count("[") + s.count("{") <= _FAST_MAX_BRACKETS
    ):
        # C speed. The C scanner recurses, counting against the recursion
        # limit (until 3.12): past it, RecursionError sends the text to the
        # iterative decoder. A program may raise the limit, so the C scanner
        # only runs under a limit its C stack can take, or on text too shallow
        # to matter.
        try:
            pos = _WS(s, 0).end()
            try:
                v, end = _fast_scan(s, pos)
            except StopIteration as e:
                raise DecodeError("expected a value at %d" % e.value) from None
            if _WS(s, end).end() != len(s):
                raise DecodeError("extra data at %d" % end)
            return v
        except RecursionError:
            pass
        except DecodeError:
            raise
        except ValueError as e:
            raise DecodeError(str(e)) from None
    try:
        return _loads_iterative(s)
    except DecodeError:
        raise
    except (ValueError, IndexError) as e:
        raise DecodeError(str(e)) from None


def loads_bytes(b):
    """Decode one strict JSON value from UTF-8 bytes."""
    try:
        s = bytes(b).decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError("invalid UTF-8: %s" % e) from None
    if _fast_scan is not None and s[:1] == "{" and _getrecursionlimit() <= _FAST_MAX_RECURSION_LIMIT:
        # A frame: loads' first path for an object without surrounding
        # whitespace, taken here without the detour; anything else, an
        # error included, goes to loads for its answer.
        try:
            v, end = _fast_scan(s, 0)
            if end == len(s):
                return v
        except (StopIteration, ValueError, RecursionError, SystemError):
            pass
    return loads(s)


def _loads_iterative(s):
    ws = _WS
    scan = _scanstring
    end_at = len(s)
    stack = []  # open containers, innermost last
    keys = []  # the pending key of each open dict (None for lists)
    pos = ws(s, 0).end()
    while True:
        # ---- one value at pos ----
        if pos >= end_at:
            raise DecodeError("expected a value at %d" % pos)
        c = s[pos]
        if c == '"':
            v, pos = scan(s, pos + 1, True)
        elif c == "{":
            pos = ws(s, pos + 1).end()
            if s[pos : pos + 1] == "}":
                v = {}
                pos += 1
            else:
                if s[pos : pos + 1] != '"':
                    raise DecodeError("expected a key at %d" % pos)
                k, pos = scan(s, pos + 1, True)
                pos = ws(s, pos).end()
                if s[pos : pos + 1] != ":":
                    raise DecodeError("expected ':' at %d" % pos)
                pos = ws(s, pos + 1).end()
                stack.append({})
                keys.append(k)
                continue
        elif c == "[":
            pos = ws(s, pos + 1).end()
            if s[pos : pos + 1] == "]":
                v = []
                pos += 1
            else:
                stack.append([])
                keys.append(None)
                continue
        elif c == "n" and s.startswith("null", pos):
            v = None
            pos += 4
        elif c == "t" and s.startswith("true", pos):
            v = True
            pos += 4
        elif c == "f" and s.startswith("false", pos):
            v = False
            pos += 5
        else:
            m = _NUMBER(s, pos)
            if m is None:
                raise DecodeError("expected a value at %d" % pos)
            if m.group(1) is None and m.group(2) is None:
                v = int(m.group())
            else:
                v = float(m.group())
            pos = m.end()
        # ---- hand v to its container, closing what it completes ----
        while True:
            pos = ws(s, pos).end()
            if not stack:
                if pos != end_at:
                    raise DecodeError("extra data at %d" % pos)
                return v
            top = stack[-1]
            c = s[pos : pos + 1]
            if type(top) is list:
                top.append(v)
                if c == ",":
                    pos = ws(s, pos + 1).end()
                    break
                if c == "]":
                    pos += 1
                    stack.pop()
                    keys.pop()
                    v = top
                    continue
                raise DecodeError("expected ',' or ']' at %d" % pos)
            top[keys[-1]] = v
            if c == ",":
                pos = ws(s, pos + 1).end()
                if s[pos : pos + 1] != '"':
                    raise DecodeError("expected a key at %d" % pos)
                k, pos = scan(s, pos + 1, True)
                pos = ws(s, pos).end()
                if s[pos : pos + 1] != ":":
                    raise DecodeError("expected ':' at %d" % pos)
                pos = ws(s, pos + 1).end()
                keys[-1] = k
                break
            if c == "}":
                pos += 1
                stack.pop()
                keys.pop()
                v = top
                continue
            raise DecodeError("expected ',' or '}' at %d" % pos)
