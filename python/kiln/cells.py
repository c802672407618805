"""Compiling and running cells in one persistent namespace, and reporting how they fail.

A cell is Python source, compiled as the interactive interpreter would: ``from __future__``
imports persist across cells, top-level ``await`` is allowed, and the value of a final
expression is displayed (its repr) and bound to ``_``. Each cell's source is registered in
``linecache`` as ``<cell-ID>`` so its tracebacks show its lines.
"""
import __future__
import ast
import inspect
import linecache
import os
import traceback

_KILN_DIR = os.path.dirname(__file__) + os.sep


class Interpreter:
    """Runs cells in one namespace, remembering the future features cells have imported."""

    def __init__(self, namespace):
        self.namespace = namespace
        self._flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT

    async def run(self, source, cell_id):
        """Run one cell; return the repr of its final expression's value, or None.

        Must run as an asyncio task: a cell may await at top level.
        """
        filename = f"<cell-{cell_id}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        body, last = self._compile(source, filename)
        if body is not None:
            await _evaluate(body, self.namespace)
        if last is None:
            return None
        value = await _evaluate(last, self.namespace)
        if value is None:
            return None
        text = repr(value)
        self.namespace["_"] = value
        return text

    def _compile(self, source, filename):
        """Return (statements, final expression) as code objects, either possibly None."""
        try:  # a lone expression, the commonest cell, compiles directly
            return None, compile(source, filename, "eval", self._flags, dont_inherit=True)
        except SyntaxError:
            pass
        tree = compile(source, filename, "exec", self._flags | ast.PyCF_ONLY_AST,
                       dont_inherit=True)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = None
        if tree.body:
            body = compile(tree, filename, "exec", self._flags, dont_inherit=True)
        self._flags |= _future_flags(tree)
        if last is not None:
            last = compile(last, filename, "eval", self._flags, dont_inherit=True)
        return body, last


async def _evaluate(code, namespace):
    result = eval(code, namespace)
    if code.co_flags & inspect.CO_COROUTINE:
        result = await result
    return result


def _future_flags(tree):
    """Return the compiler flags of the ``from __future__`` imports atop a module."""
    flags = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                flags |= getattr(__future__, alias.name).compiler_flag
    return flags


def format_exception(exc):
    """Return exc's traceback as text, without kiln's own frames, chained exceptions included."""
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
