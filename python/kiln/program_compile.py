"""Compiling a program: its source as the body of an ``async def <module>()``
whose top-level names are the module's globals, so that it may await and
``return v``; and whether that body can ever suspend, as the compiled code
says."""

import builtins as _builtins_module

__builtins__ = dict(vars(_builtins_module))

# The node classes are _ast's: the ast module imports enum, contextlib and what they
# import, which costs a cold child more than all its own modules; the three helpers of
# it used here are below.
import _ast
import opcode as _opcode

FILENAME = "<model>"


STAR_HELPER = "__kiln_import_star__"
_SCOPES = (_ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef)
_COMPREHENSIONS = (_ast.ListComp, _ast.SetComp, _ast.DictComp, _ast.GeneratorExp)
_STATEMENT_LISTS = ("body", "orelse", "finalbody")
# The instructions at which a coroutine's own frame suspends: every await, async
# for and async with of a body compiles to one of them (YIELD_FROM up to 3.10,
# SEND and YIELD_VALUE since); a version lacks some.
_SUSPEND_OPS = frozenset(_opcode.opmap[n] for n in ("YIELD_VALUE", "YIELD_FROM", "SEND") if n in _opcode.opmap)
_AST = _ast.AST
_LOCATION = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def _parse(source):
    """The tree of source, as ast.parse makes it."""
    return compile(source, FILENAME, "exec", _ast.PyCF_ONLY_AST)


def _copy_location(new, old):
    """Give new the location of old, as ast.copy_location does; return new."""
    for attr in _LOCATION:
        if attr in old._attributes and attr in new._attributes:
            value = getattr(old, attr, None)
            # end_lineno and end_col_offset are optional: copied even when None
            if value is not None or (hasattr(old, attr) and attr.startswith("end_")):
                setattr(new, attr, value)
    return new


def _iter_child_nodes(node):
    """The direct children of node, as ast.iter_child_nodes gives them."""
    for name in node._fields:
        try:
            field = getattr(node, name)
        except AttributeError:
            continue
        if isinstance(field, _AST):
            yield field
        elif isinstance(field, list):
            for item in field:
                if isinstance(item, _AST):
                    yield item


def _prepare(tree):
    """Rewrite the module body for life inside an async def; return
    (future imports, body, names bound at top level, whether a star import
    was rewritten). Raises SyntaxError for a top-level yield."""
    body = tree.body
    head = []
    i = 0
    if body and type(body[0]) is _ast.Expr and type(body[0].value) is _ast.Constant and type(body[0].value.value) is str:
        i = 1
    while i < len(body) and type(body[i]) is _ast.ImportFrom and body[i].module == "__future__":
        i += 1
    head, body = body[:i], body[i:]
    futures = [n for n in head if type(n) is _ast.ImportFrom]
    body = [n for n in head if type(n) is not _ast.ImportFrom] + body
    names = set()
    star = False
    holder = _ast.Module(body=body, type_ignores=[])
    todo = [(holder, False)]
    while todo:
        node, in_comprehension = todo.pop()
        t = type(node)
        # statement lists of this scope: rewrite annotated names and star imports
        for field in _STATEMENT_LISTS:
            stmts = getattr(node, field, None)
            if type(stmts) is not list:
                continue
            for j, st in enumerate(stmts):
                st_t = type(st)
                if st_t is _ast.AnnAssign and type(st.target) is _ast.Name:
                    # "x: T = v" at module level; inside the function x is global,
                    # and a global may not be annotated: keep the binding.
                    # (Every node made here takes the location of the statement it replaces.)
                    if st.value is None:
                        new = _ast.Pass()
                    else:
                        target = _copy_location(_ast.Name(id=st.target.id, ctx=_ast.Store()), st)
                        new = _ast.Assign(targets=[target], value=st.value)
                    stmts[j] = _copy_location(new, st)
                elif st_t is _ast.ImportFrom and any(a.name == "*" for a in st.names):
                    star = True
                    call = _copy_location(_ast.Call(
                        func=_copy_location(_ast.Name(id=STAR_HELPER, ctx=_ast.Load()), st),
                        args=[_copy_location(_ast.Constant(value=st.module or ""), st),
                              _copy_location(_ast.Constant(value=st.level or 0), st)],
                        keywords=[],
                    ), st)
                    stmts[j] = _copy_location(_ast.Expr(value=call), st)
        if t is _ast.Name:
            if not in_comprehension and type(node.ctx) is not _ast.Load:
                names.add(node.id)
            continue
        if t is _ast.NamedExpr:
            if type(node.target) is _ast.Name:
                names.add(node.target.id)
            todo.append((node.value, in_comprehension))
            continue
        if t in (_ast.Yield, _ast.YieldFrom):
            raise SyntaxError("'yield' outside function", (FILENAME, node.lineno, node.col_offset + 1, None))
        if t in _SCOPES:
            names.add(node.name)
            parts = list(node.decorator_list)
            if t is _ast.ClassDef:
                parts += node.bases + [k.value for k in node.keywords]
            else:
                a = node.args
                parts += a.defaults + [d for d in a.kw_defaults if d is not None]
                for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
                    if arg is not None and arg.annotation is not None:
                        parts.append(arg.annotation)
                if node.returns is not None:
                    parts.append(node.returns)
            todo.extend((p, in_comprehension) for p in parts)
            continue
        if t is _ast.Lambda:
            a = node.args
            todo.extend((d, in_comprehension) for d in a.defaults + [d for d in a.kw_defaults if d is not None])
            continue
        if t in _COMPREHENSIONS:
            todo.extend((c, True) for c in _iter_child_nodes(node))
            continue
        if t is _ast.Import or t is _ast.ImportFrom:
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
            continue
        if t is _ast.Global:
            names.update(node.names)
            continue
        if t is _ast.ExceptHandler and node.name:
            names.add(node.name)
        elif t.__name__ in ("MatchAs", "MatchStar") and node.name:
            names.add(node.name)
        elif t.__name__ == "MatchMapping" and node.rest:
            names.add(node.rest)
        todo.extend((c, in_comprehension) for c in _iter_child_nodes(node))
    names.discard(STAR_HELPER)
    return futures, holder.body, names, star


_CODE = type(_prepare.__code__)
_LINE_1 = {"lineno": 1, "col_offset": 0, "end_lineno": 1, "end_col_offset": 0}


def compile_program(source):
    """Compile the program as ``async def <module>():`` with its top-level
    names declared global, so that it reads like a module; return (the code,
    whether the function takes the star-import helper, whether its body can
    suspend)."""
    tree = _parse(source)
    futures, body, names, star = _prepare(tree)
    # The nodes made here sit at line 1, column 0, where ast.fix_missing_locations
    # would put them (the parsed ones and _prepare's have theirs), without its walk.
    if names:
        body.insert(0, _ast.Global(names=sorted(names), **_LINE_1))
    if not body:
        body.append(_ast.Pass(**_LINE_1))
    kwonly = [_ast.arg(arg=STAR_HELPER, **_LINE_1)] if star else []
    args = _ast.arguments(
        posonlyargs=[], args=[], vararg=None, kwonlyargs=kwonly,
        kw_defaults=[None] * len(kwonly), kwarg=None, defaults=[],
    )
    fn = _ast.AsyncFunctionDef(
        name="<module>", args=args, body=body, decorator_list=[], returns=None,
        type_comment=None, **_LINE_1,
    )
    if "type_params" in _ast.AsyncFunctionDef._fields:  # Python 3.12+
        fn.type_params = []
    module = _ast.Module(body=futures + [fn], type_ignores=[])
    code = compile(module, FILENAME, "exec", dont_inherit=True)
    return code, star, suspends(code)


def suspends(module_code):
    """Whether the body of the ``<module>`` function that module_code defines
    has an instruction at which its frame suspends. One that has none runs to
    its end at its first step, whatever it calls: what it awaits is what it
    suspends on. Bytecode is a sequence of two-byte units whose first byte is
    the operation (inline caches are zeros), so the even bytes are all there is
    to look at."""
    for const in module_code.co_consts:
        if type(const) is _CODE and const.co_name == "<module>":
            return not _SUSPEND_OPS.isdisjoint(const.co_code[0::2])
    raise ValueError("the compiled program has no <module> function")


def star_importer(namespace):
    def import_star(module, level):
        m = __import__(module, namespace, None, ("*",), level)
        public = getattr(m, "__all__", None)
        if public is None:
            public = [n for n in vars(m) if not n.startswith("_")]
        for n in public:
            namespace[n] = getattr(m, n)

    return import_star
