"""Tracebacks of a failed program, as CPython renders them but for the
program's own frames only, and error messages cut to the value budget."""

import builtins as _builtins_module

__builtins__ = dict(vars(_builtins_module))


from kiln import jsonplain as _jp
from kiln.program_compile import FILENAME

_get_cause = BaseException.__cause__.__get__
_get_context = BaseException.__context__.__get__
_get_suppress = BaseException.__suppress_context__.__get__
_get_traceback = BaseException.__traceback__.__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_type_module = type.__dict__["__module__"].__get__
_BaseExceptionGroup = getattr(_builtins_module, "BaseExceptionGroup", None)
_has_surrogate = _jp.has_surrogate

CHAIN_LIMIT = 100
CHAIN_MARKER = "[kiln] exception chain truncated at %d links" % CHAIN_LIMIT
TRUNCATED = "… [truncated]"


def class_name(cls):
    name = _type_qualname(cls)
    module = _type_module(cls)
    if type(module) is str and module not in ("builtins", "__main__"):
        return "%s.%s" % (module, name)
    return name


class Renderer:
    def __init__(self, source_lines):
        self.lines = source_lines

    def source_line(self, lineno, strip=True):
        if type(lineno) is int and 1 <= lineno <= len(self.lines):
            line = self.lines[lineno - 1]
            return line.strip() if strip else line
        return ""

    def render(self, exc):
        chain = []  # (exception, how the older one it leads to relates to it)
        seen = set()
        e = exc
        truncated = False
        while e is not None and id(e) not in seen:
            if len(chain) == CHAIN_LIMIT:
                truncated = True
                break
            seen.add(id(e))
            cause = _get_cause(e)
            context = _get_context(e)
            if cause is not None:
                chain.append((e, "\nThe above exception was the direct cause of the following exception:\n\n"))
                e = cause
            elif context is not None and not _get_suppress(e):
                chain.append((e, "\nDuring handling of the above exception, another exception occurred:\n\n"))
                e = context
            else:
                chain.append((e, None))
                e = None
        out = []
        if truncated:
            out.append(CHAIN_MARKER + "\n")
        for i in range(len(chain) - 1, -1, -1):
            e, link = chain[i]
            if i < len(chain) - 1:
                out.append(link)
            self.one(e, out, "")
        return "".join(out).rstrip("\n")

    def one(self, e, out, indent, depth=0):
        frames = []
        tb = _get_traceback(e)
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename == FILENAME:
                frames.append((tb.tb_lineno, code.co_name))
            tb = tb.tb_next
        if frames:
            out.append(indent + "Traceback (most recent call last):\n")
            last = None
            repeats = 0
            for entry in frames:
                if entry == last:
                    repeats += 1
                    if repeats >= 3:
                        continue
                else:
                    if repeats >= 3:
                        out.append("%s  [Previous line repeated %d more time%s]\n"
                                   % (indent, repeats - 2, "" if repeats - 2 == 1 else "s"))
                    last = entry
                    repeats = 0
                lineno, name = entry
                out.append('%s  File "%s", line %s, in %s\n'
                           % (indent, FILENAME, lineno if type(lineno) is int else "?", name))
                line = self.source_line(lineno)
                if line:
                    out.append("%s    %s\n" % (indent, line))
            if repeats >= 3:
                out.append("%s  [Previous line repeated %d more time%s]\n"
                           % (indent, repeats - 2, "" if repeats - 2 == 1 else "s"))
        out.extend(indent + line + "\n" for line in self.exception_only(e))
        if _BaseExceptionGroup is not None and isinstance(e, _BaseExceptionGroup) and depth < 2:
            subs = list(e.exceptions)
            for n, sub in enumerate(subs[:15], 1):
                out.append("%s+---------------- %d ----------------\n" % (indent, n))
                self.one(sub, out, indent + "| ", depth + 1)
            if len(subs) > 15:
                out.append("%s+---------------- ... ----------------\n%sand %d more exceptions\n"
                           % (indent, indent, len(subs) - 15))

    def exception_only(self, e):
        name = class_name(type(e))
        lines = []
        if isinstance(e, SyntaxError):
            filename = e.filename if type(e.filename) is str else FILENAME
            lineno = e.lineno
            lines.append('  File "%s", line %s' % (filename, lineno if lineno is not None else "?"))
            text = e.text if type(e.text) is str else (self.source_line(lineno, False) if filename == FILENAME else "")
            if text:
                text = text.rstrip("\n")
                stripped = text.lstrip()
                lines.append("    " + stripped)
                offset = e.offset
                if type(offset) is int and offset >= 1:
                    col = max(0, offset - 1 - (len(text) - len(stripped)))
                    end = e.end_offset if type(getattr(e, "end_offset", None)) is int else offset + 1
                    width = max(1, min(end - offset, len(stripped) - col) if end > offset else 1)
                    lines.append("    " + " " * col + "^" * width)
            msg = e.msg if type(e.msg) is str else str(e)
        else:
            msg = str(e)
            if type(msg) is not str:
                raise TypeError("__str__ returned non-string")
        lines.append("%s: %s" % (name, msg) if msg else name)
        notes = getattr(e, "__notes__", None)
        if type(notes) is list:
            for note in notes:
                lines.append(note if type(note) is str else "<note str() failed>")
        return lines


def cap(text, cap):
    """text cut to cap UTF-8 bytes, '… [truncated]' reserved inside the cap,
    the cut on a code-point boundary."""
    if _has_surrogate(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= cap:
        return text
    marker = TRUNCATED.encode("utf-8")
    if cap < len(marker):
        data, tail = marker, b""
    else:
        cap -= len(marker)
        tail = marker
    while cap > 0 and (data[cap] & 0xC0) == 0x80:
        cap -= 1
    return (data[:cap] + tail).decode("utf-8", "surrogatepass")
