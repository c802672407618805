"""Compiling and running cells in one persistent namespace, and reporting how they fail.

A cell is Python source, compiled as the interactive interpreter would: ``from __future__``
imports persist across cells, top-level ``await`` is allowed, and the value of a final
expression is displayed (its repr) and bound to ``_``. Each cell's source is registered in
``linecache`` as ``<cell-ID>`` so its tracebacks show its lines.
"""
import __future__
import _ast  # the node types and flags that ast publishes, without ast's start-up cost
import linecache
import os

_KILN_DIR = os.path.dirname(__file__) + os.sep


# The co_flags bit of a code object that must be awaited (inspect.CO_COROUTINE); named here
# so that the worker need not import inspect at start.
_CO_COROUTINE = 0x0080


class Compiled:
    """A cell compiled: its statements and its final expression as code objects, either
    possibly None, and whether running it needs an event loop (top-level ``await``)."""

    __slots__ = ("body", "last", "awaits")

    def __init__(self, body, last):
        self.body = body
        self.last = last
        self.awaits = bool((body is not None and body.co_flags & _CO_COROUTINE)
                           or (last is not None and last.co_flags & _CO_COROUTINE))


class Interpreter:
    """Runs cells in one namespace, remembering the future features cells have imported."""

    def __init__(self, namespace):
        self.namespace = namespace
        self._flags = _ast.PyCF_ALLOW_TOP_LEVEL_AWAIT

    def compile(self, source, cell_id):
        """Compile one cell; raise SyntaxError (or ValueError) as the compiler does."""
        filename = f"<cell-{cell_id}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:  # a lone expression, the commonest cell, compiles directly
            return Compiled(None, compile(source, filename, "eval", self._flags,
                                          dont_inherit=True))
        except SyntaxError:
            pass
        tree = compile(source, filename, "exec", self._flags | _ast.PyCF_ONLY_AST,
                       dont_inherit=True)
        last = None
        if tree.body and isinstance(tree.body[-1], _ast.Expr):
            last = _ast.Expression(tree.body.pop().value)
        body = None
        if tree.body:
            body = compile(tree, filename, "exec", self._flags, dont_inherit=True)
        self._flags |= _future_flags(tree)
        if last is not None:
            last = compile(last, filename, "eval", self._flags, dont_inherit=True)
        return Compiled(body, last)

    def run(self, cell):
        """Run a compiled cell that does not await; return the repr of its final
        expression's value, or None."""
        if cell.body is not None:
            eval(cell.body, self.namespace)
        if cell.last is None:
            return None
        return self._display(eval(cell.last, self.namespace))

    async def run_async(self, cell):
        """Run a compiled cell as run does, awaiting what it awaits at top level.

        Must run as an asyncio task.
        """
        if cell.body is not None:
            await _evaluate(cell.body, self.namespace)
        if cell.last is None:
            return None
        return self._display(await _evaluate(cell.last, self.namespace))

    def _display(self, value):
        if value is None:
            return None
        text = repr(value)
        self.namespace["_"] = value
        return text


async def _evaluate(code, namespace):
    result = eval(code, namespace)
    if code.co_flags & _CO_COROUTINE:
        result = await result
    return result


def _future_flags(tree):
    """Return the compiler flags of the ``from __future__`` imports atop a module."""
    flags = 0
    for node in tree.body:
        if isinstance(node, _ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                flags |= getattr(__future__, alias.name).compiler_flag
    return flags


def format_exception(exc):
    """Return exc's traceback as text, without kiln's own frames, chained exceptions included."""
    import traceback  # here, not above: most workers never format a traceback

    report = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    pending, seen = [report], set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.stack[:] = [frame for frame in current.stack
                            if not frame.filename.startswith(_KILN_DIR)]
        pending += [current.__cause__, current.__context__]
        pending += getattr(current, "exceptions", None) or ()  # an exception group's members
    return "".join(report.format())


def exception_parts(exc):
    """Return exc as the parts a record carries, each capped as error text is: its type's
    name, its value as str() gives it, and its traceback (format_exception)."""
    from kiln.output import cap_error_text  # here, not above: only a failed cell needs it
    from kiln.wire import MAX_EXCEPTION_TYPE_BYTES

    try:
        value = str(exc)
    except Exception:  # a __str__ that raises says nothing
        value = f"<unprintable {type(exc).__name__} object>"
    name = type(exc).__name__.encode("utf-8", "replace")[:MAX_EXCEPTION_TYPE_BYTES].decode("utf-8", "ignore")
    return {"type": name, "value": cap_error_text(value),
            "traceback": cap_error_text(format_exception(exc))}


def complete_names(namespace, text):
    """Return what completes text in namespace as Python's own REPL would (rlcompleter:
    names, keywords, builtins, and an object's attributes after a dot), at most
    MAX_MATCHES of them, each at most MAX_MATCH_BYTES; none for blank text."""
    import rlcompleter  # here, not above: only a completion needs it
    from kiln.wire import MAX_MATCH_BYTES, MAX_MATCHES

    if not text.strip():
        return []
    completer = rlcompleter.Completer(namespace)
    try:
        found = completer.attr_matches(text) if "." in text else completer.global_matches(text)
    except Exception:  # an attribute lookup that raised: nothing to offer
        return []
    matches = []
    for match in dict.fromkeys(found):
        if len(matches) == MAX_MATCHES:
            break
        if len(match.encode("utf-8", "replace")) <= MAX_MATCH_BYTES:
            matches.append(match)
    return matches
