"""Return-path facts (link 6 of the capture chain), read from one method's own syntax.

Whether captured states reach the runner is decided by three small shapes, each found by
structure only (stdlib ``ast`` on the method's source lines, like :mod:`stream_facts`):

* how a ``forward`` handles what ``self.<attr>(...)`` returned (:class:`OutputUseFact`): it
  unpacks it (``h, aux = out``), passes it on (``return out``), or drops all but its first
  element (``return out[0]``), and under which ``self.<flag>`` test;
* what a ``forward`` itself returns (:class:`ReturnShapeFact`): a tuple display, a single
  value (a name only ever bound as a parameter or one element of an unpacking), or other;
* boolean attributes ``__init__`` sets (:class:`FlagDefaultFact`) and the other methods of
  the class that assign them: a flag only ``__init__`` sets keeps its value.

The analysis (:mod:`flowtrace.analysis.resolve`) combines them with the setter chain.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Callable, Iterable

from flowtrace.index.syntax import all_statements
from flowtrace.model import facts as F

UNPACK, PASS, DROP, CONSUME = (
    F.OutputUseKind.UNPACK,
    F.OutputUseKind.PASS,
    F.OutputUseKind.DROP,
    F.OutputUseKind.CONSUME,
)
TUPLE, SINGLE, OTHER = F.ReturnShape.TUPLE, F.ReturnShape.SINGLE, F.ReturnShape.OTHER

_Flag = tuple[str, bool] | None


def _parse(text: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    try:
        tree = ast.parse(textwrap.dedent(text))
    except (SyntaxError, ValueError, RecursionError):
        return None
    fn = tree.body[0] if tree.body else None
    return fn if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")
_BLOCK_FIELDS: dict[type, tuple[str, ...]] = {}


def _blocks(node: ast.AST) -> list[ast.AST]:
    """The statements, ``except`` clauses and ``case`` blocks directly below a statement (or a
    clause), in ``iter_child_nodes`` order. Statements stand only there, so a walk over these
    meets every statement, in the same relative order as a walk over every node, without
    visiting the expressions (most of a method's nodes)."""
    kind = node.__class__
    fields = _BLOCK_FIELDS.get(kind)
    if fields is None:
        fields = _BLOCK_FIELDS[kind] = tuple(f for f in kind._fields if f in _BLOCKS)
    out: list[ast.AST] = []
    for field in fields:
        value = getattr(node, field, None)
        if value.__class__ is list:
            out += value
    return out


def _statements_breadth_first(fn: ast.AST) -> list[ast.AST]:
    """The statements of ``fn`` (nested defs included) in the order ``ast.walk`` meets them:
    level by level, a level in its parents' order. Clauses and cases stand on their own level
    as in the full tree, so every statement keeps its depth and the order is the same."""
    out, i = _blocks(fn), 0
    while i < len(out):
        out += _blocks(out[i])
        i += 1
    return out


# Fields that never hold a node (names, numbers, flags, strings), and ``ctx`` (a leaf no caller
# asks for): skipped without a getattr. A ``Constant``'s value is never a node either.
_LEAF_FIELDS = frozenset(
    {
        "id",
        "attr",
        "arg",
        "module",
        "level",
        "kind",
        "type_comment",
        "is_async",
        "conversion",
        "ctx",
        "rest",
        "kwd_attrs",
        "tag",
    }
)
_NODE_FIELDS: dict[type, tuple[str, ...]] = {ast.Constant: (), ast.MatchSingleton: ()}


def nodes(root: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(root))`` less the expression contexts (``Load``, ``Store``), same order
    (breadth first), without its two generator layers per node (``iter_child_nodes`` over
    ``iter_fields``) and without looking into fields that cannot hold a node: a third of
    the time. What every caller looks for here is a statement or an expression."""
    out, i, node_type, fields_of = [root], 0, ast.AST, _NODE_FIELDS
    while i < len(out):
        current = out[i]
        i += 1
        kind = current.__class__
        fields = fields_of.get(kind)
        if fields is None:
            fields = fields_of[kind] = tuple(f for f in kind._fields if f not in _LEAF_FIELDS)
        for name in fields:
            value = getattr(current, name, None)
            if value.__class__ is list:
                out.extend([item for item in value if isinstance(item, node_type)])
            elif isinstance(value, node_type):
                out.append(value)
    return out


def _self_attribute(node: ast.AST) -> str | None:
    """``self.<name>`` -> name."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def flag_test(test: ast.expr) -> _Flag:
    """``self.<f>`` -> (f, True); ``not self.<f>`` -> (f, False); anything else None."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = flag_test(test.operand)
        return (inner[0], not inner[1]) if inner else None
    name = _self_attribute(test)
    return (name, True) if name else None


def _inner_call(node: ast.AST) -> str | None:
    """``self.<attr>(...)`` -> attr (the inner model a wrapper calls)."""
    if isinstance(node, ast.Call):
        return _self_attribute(node.func)
    return None


def _routed_call(node: ast.AST, method: str) -> tuple[tuple[str, ...], str] | None:
    """(attributes, via) for an output that reaches a forward another way than ``self.<attr>(...)``:
    the base's own version (``super().forward(...)`` -> ((method,), "super()")), or a module-level
    helper handed some of the model's attributes (``routine(language_model=self.model,
    flag=self.flag)`` -> (("model", "flag"), "routine")), whose result is taken for the output of
    whichever of them is a module (the reader keeps those whose class it resolves)."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == method and isinstance(func.value, ast.Call):
        base = func.value.func
        return ((method,), "super()") if isinstance(base, ast.Name) and base.id == "super" else None
    if isinstance(func, ast.Name):
        handed = tuple(
            dict.fromkeys(a for v in (*node.args, *(k.value for k in node.keywords)) if (a := _self_attribute(v)))
        )
        return (handed, func.id) if handed else None
    return None


def _ends_in_return(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def _drops(value: ast.expr, name: str) -> bool:
    """Whether ``value`` keeps only an element of ``name``: ``name[0]``, or
    ``name[0] if isinstance(name, tuple) else name``."""
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == name:
        return isinstance(value.slice, ast.Constant)
    if isinstance(value, ast.IfExp) and isinstance(value.test, ast.Call) and isinstance(value.test.func, ast.Name):
        tested = value.test.func.id == "isinstance" and any(
            isinstance(a, ast.Name) and a.id == name for a in value.test.args
        )
        plain = isinstance(value.orelse, ast.Name) and value.orelse.id == name
        return tested and plain and _drops(value.body, name)
    return False


def _text(node: ast.stmt, texts: dict[ast.stmt, str]) -> str:
    """A statement as the facts quote it (its unparsed source on one line, 160 characters at
    most), unparsed once: ``return self.model(x)`` is both an output use of a forward and one
    of its return shapes, and one statement can be the use of several inner models."""
    text = texts.get(node)
    if text is None:
        text = texts[node] = " ".join(ast.unparse(node).split())[:160]
    return text


class _Uses:
    """Walks a forward's statements in order, following the names bound to inner calls."""

    def __init__(self, qualname: str, function: str, path: str, offset: int, texts: dict[ast.stmt, str]) -> None:
        self.qualname, self.function, self.path, self.offset = qualname, function, path, offset
        self.texts = texts  # statement -> its quoted text, shared with the return shapes
        self.bound: dict[str, str] = {}  # local name -> the self.<attr> whose output it holds
        self.out: list[F.OutputUseFact] = []
        # Outputs that reach the forward another way (see _routed_call): local name -> (attribute,
        # via); and the names bound to one element of the base's own output (``h, x = out``).
        self.routed: dict[str, tuple[tuple[str, ...], str]] = {}
        self.parts: dict[str, tuple[tuple[str, ...], str]] = {}

    def add(
        self, attribute: str, kind: F.OutputUseKind, arity: int, flag: _Flag, node: ast.stmt, via: str | None = None
    ) -> None:
        where = F.Location(self.path, node.lineno + self.offset)
        text = _text(node, self.texts)
        self.out.append(F.OutputUseFact(self.qualname, self.function, attribute, kind, arity,
                                        flag[0] if flag else None, flag[1] if flag else None, where, text, via))

    def block(self, body: list[ast.stmt], flag: _Flag) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                tested = flag_test(stmt.test)
                self.block(stmt.body, tested or flag)
                other = (tested[0], not tested[1]) if tested else flag
                self.block(stmt.orelse, other)
                if tested and _ends_in_return(stmt.body) and not stmt.orelse:
                    flag = other  # `if self.f: ... return` -> the rest runs with the flag off
            elif isinstance(stmt, ast.Assign):
                self.assign(stmt, flag)
            elif isinstance(stmt, ast.Return) and stmt.value is not None:
                self.returned(stmt, stmt.value, flag)

    def assign(self, stmt: ast.Assign, flag: _Flag) -> None:
        target = stmt.targets[0] if len(stmt.targets) == 1 else None
        called = _inner_call(stmt.value)
        source = stmt.value.id if isinstance(stmt.value, ast.Name) else None
        attribute = called or (self.bound.get(source) if source else None)
        if isinstance(target, ast.Tuple) and attribute:
            self.add(attribute, UNPACK, len(target.elts), flag, stmt)
        routed = (
            None
            if called
            else _routed_call(stmt.value, self.function.rsplit(".", 1)[-1]) or self.routed.get(source or "")
        )
        if isinstance(target, ast.Tuple) and routed is not None and not attribute:
            for module in routed[0]:
                self.add(module, UNPACK, len(target.elts), flag, stmt, routed[1])
        if self.bound or self.routed or self.parts:  # else nothing to forget: most statements of most forwards
            for bound in stmt.targets:  # rebound: no longer the inner model's output
                for name in (n.id for n in nodes(bound) if isinstance(n, ast.Name)):
                    self.bound.pop(name, None)
                    self.routed.pop(name, None)
                    self.parts.pop(name, None)
        if isinstance(target, ast.Name) and called:
            self.bound[target.id] = called
        elif isinstance(target, ast.Name) and routed:
            self.routed[target.id] = routed
        elif isinstance(target, ast.Tuple) and routed and routed[1] == "super()":
            self.parts.update((e.id, routed) for e in target.elts if isinstance(e, ast.Name))

    def returned(self, stmt: ast.Return, value: ast.expr, flag: _Flag) -> None:
        called = _inner_call(value)
        if isinstance(value, ast.Call):  # `return self.head(x, out)`: the output handed on whole
            handed = [a for a in (*value.args, *(k.value for k in value.keywords)) if isinstance(a, ast.Name)]
            for attribute in dict.fromkeys(
                self.bound[a.id] for a in handed if a.id in self.bound and self.bound[a.id] != called
            ):
                self.add(attribute, CONSUME, 0, flag, stmt)
        if called:
            self.add(called, PASS, 0, flag, stmt)
            return
        if isinstance(value, ast.Subscript) and _inner_call(value.value) and isinstance(value.slice, ast.Constant):
            self.add(_inner_call(value.value) or "", DROP, 0, flag, stmt)
            return
        part = self.parts.get(value.id) if isinstance(value, ast.Name) else None
        if part is not None:  # `h, x = super().forward(...); return h`: one element of the base's output
            for module in part[0]:
                self.add(module, DROP, 0, flag, stmt, part[1])
        for name, attribute in self.bound.items():
            if isinstance(value, ast.Name) and value.id == name:
                self.add(attribute, PASS, 0, flag, stmt)
            elif _drops(value, name):
                self.add(attribute, DROP, 0, flag, stmt)


_Fn = ast.FunctionDef | ast.AsyncFunctionDef
Loader = Callable[[str], "tuple[_Fn, int] | None"]  # method name -> (its def, line offset)
# (output uses, return shapes, flag defaults) of a class or a module
ReturnFacts = tuple[list[F.OutputUseFact], list[F.ReturnShapeFact], list[F.FlagDefaultFact]]
ModuleReturnFacts = tuple[tuple[F.OutputUseFact, ...], tuple[F.ReturnShapeFact, ...], tuple[F.FlagDefaultFact, ...]]


def _output_uses(
    path: str, qualname: str, function: str, fn: _Fn, offset: int, texts: dict[ast.stmt, str]
) -> list[F.OutputUseFact]:
    """How one forward handles its inner model's output, in statement order."""
    walker = _Uses(qualname, function, path, offset, texts)
    walker.block(fn.body, None)
    return walker.out


# What can bind a name inside an expression: a comprehension's ``for`` (``[x for x in y]``,
# ``[1for x in y]``: no word boundary before it) or a walrus. A method whose text holds
# neither binds names in statements only (a docstring's "for" only costs the full walk).
_EXPRESSION_BINDING = re.compile(r"for(?![A-Za-z0-9_])|:=")


def binds_in_expressions(fn: _Fn, text: str | None) -> bool:
    """Whether ``fn`` may bind a name inside an expression, read from its source ``text``
    (None: unknown). Its decorators stand above the text: a decorated method may."""
    return text is None or bool(fn.decorator_list) or _EXPRESSION_BINDING.search(text) is not None


def _binding_nodes(fn: _Fn, expressions: bool) -> Iterable[ast.AST]:
    """The nodes :func:`_bindings` reads: every node, or (``expressions`` False: no name is
    bound in an expression) the statements and ``with`` items only, a fraction of them."""
    if expressions:
        return nodes(fn)
    out: list[ast.AST] = []
    for stmt in all_statements(fn.body):
        out.append(stmt)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            out += stmt.items
    return out


def _bindings(fn: _Fn, expressions: bool = True) -> dict[str, set[str]]:
    """Name -> how it is bound: "element" (one target of an unpacking, a parameter, an
    augmented assignment), "tuple:<n>" (a tuple display), "other". The kinds are sets and
    only looked up, so the walk's order is free (see :func:`_binding_nodes`)."""
    out: dict[str, set[str]] = {}
    for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs):
        out.setdefault(a.arg, set()).add("element")
    for node in _binding_nodes(fn, expressions):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    kind = f"tuple:{len(node.value.elts)}" if isinstance(node.value, ast.Tuple) else "other"
                    out.setdefault(target.id, set()).add(kind)
                elif isinstance(target, (ast.Tuple, ast.List)):
                    for element in target.elts:
                        if isinstance(element, ast.Name):
                            out.setdefault(element.id, set()).add("element")
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, set()).add("element")
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.NamedExpr, ast.withitem)):
            bound: ast.expr | None = node.optional_vars if isinstance(node, ast.withitem) else node.target
            for name in (n.id for n in nodes(bound) if isinstance(n, ast.Name)) if bound is not None else ():
                out.setdefault(name, set()).add("other")
    return out


def _shape(value: ast.expr, bindings: dict[str, set[str]]) -> tuple[F.ReturnShape, int]:
    if isinstance(value, ast.Tuple):
        return TUPLE, len(value.elts)
    if isinstance(value, ast.Name):
        kinds = bindings.get(value.id, {"other"})
        if kinds == {"element"}:
            return SINGLE, 0
        only = next(iter(kinds)) if len(kinds) == 1 else ""
        if only.startswith("tuple:"):
            return TUPLE, int(only.split(":")[1])
    return OTHER, 0


def _return_shapes(
    path: str,
    qualname: str,
    function: str,
    fn: _Fn,
    offset: int,
    texts: dict[ast.stmt, str],
    expressions: Callable[[], bool],
) -> list[F.ReturnShapeFact]:
    """The shape of every value a forward returns (nested functions excluded). ``expressions()``:
    whether names may be bound inside its expressions (:func:`binds_in_expressions`), asked only
    when a returned name needs the bindings (a regex search over the forward's text)."""
    bindings: dict[str, set[str]] | None = None  # read only for a returned name: built on the first
    out = []
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        stack.extend(_blocks(node))  # a return is a statement: no expression holds one
        if isinstance(node, ast.Return) and node.value is not None:
            if bindings is None and isinstance(node.value, ast.Name):
                bindings = _bindings(fn, expressions())
            shape, arity = _shape(node.value, bindings or {})
            text = _text(node, texts)
            out.append(
                F.ReturnShapeFact(qualname, function, F.Location(path, node.lineno + offset), shape, arity, text)
            )
    return sorted(out, key=lambda r: r.location.line)


def _bool_flags(fn: _Fn, offset: int) -> dict[str, tuple[bool, int]]:
    found: dict[str, tuple[bool, int]] = {}
    for node in _statements_breadth_first(fn):  # the first assignment of a flag wins, as in ast.walk
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool):
            for target in node.targets:
                name = _self_attribute(target)
                if name:
                    found.setdefault(name, (node.value.value, node.lineno + offset))
    return found


def _assigns(fn: _Fn, names: set[str]) -> set[str]:
    """Which of ``names`` the method assigns as ``self.<name>``."""
    out = set()
    for node in _statements_breadth_first(fn):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        )
        for target in targets:
            name = _self_attribute(target)
            if name in names:
                out.add(name)
    return out


def class_facts(
    path: str,
    qualname: str,
    methods: Iterable[str],
    load: Loader,
    mentions: Callable[[str, str], bool],
    text: Callable[[str], str | None] = lambda method: None,
) -> ReturnFacts:
    """(output uses, return shapes, flag defaults) of one class. ``load`` parses a method on
    demand; ``mentions(method, word)`` is a cheap gate before parsing one for flag writes;
    ``text(method)``, its source when known, spares the forward's expressions a walk for
    names bound there when it shows none can be (:func:`binds_in_expressions`)."""
    name = qualname.rsplit(".", 1)[-1]
    uses: list[F.OutputUseFact] = []
    shapes: list[F.ReturnShapeFact] = []
    flags: list[F.FlagDefaultFact] = []
    methods = tuple(methods)
    forward = load("forward") if "forward" in methods else None
    if forward is not None:
        texts: dict[ast.stmt, str] = {}
        uses = _output_uses(path, qualname, f"{name}.forward", *forward, texts)
        fn = forward[0]
        shapes = _return_shapes(
            path, qualname, f"{name}.forward", *forward, texts, lambda: binds_in_expressions(fn, text("forward"))
        )
    init = load("__init__") if "__init__" in methods else None
    found = _bool_flags(*init) if init is not None else {}
    if found:
        writers: dict[str, list[str]] = {flag: [] for flag in found}
        for method in methods:
            if method == "__init__" or not any(mentions(method, f"self.{flag}") for flag in found):
                continue
            loaded = load(method)
            for flag in _assigns(loaded[0], set(found)) if loaded else ():
                writers[flag].append(method)
        flags = [F.FlagDefaultFact(qualname, flag, value, F.Location(path, line), tuple(sorted(writers[flag])))
                 for flag, (value, line) in sorted(found.items())]
    return uses, shapes, flags


def module_facts(
    path: str, modname: str, tree: ast.Module, text_of: Callable[[ast.stmt], str] | None = None
) -> ModuleReturnFacts:
    """Return-path facts of every top-level class of a parsed module (lines are the file's):
    both tiers call this on the stdlib tree they already have. ``text_of`` (a method's source
    text) gates the search for flag writers on the method naming ``self.<flag>``."""
    uses: list[F.OutputUseFact] = []
    shapes: list[F.ReturnShapeFact] = []
    flags: list[F.FlagDefaultFact] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        methods: dict[str, _Fn] = {
            m.name: m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
        }

        def load(name: str, methods: dict[str, _Fn] = methods) -> tuple[_Fn, int]:
            return methods[name], 0

        def mentions(method: str, word: str, methods: dict[str, _Fn] = methods) -> bool:
            return text_of is None or word in text_of(methods[method])

        def text(method: str, methods: dict[str, _Fn] = methods) -> str | None:
            return text_of(methods[method]) if text_of is not None else None

        found_uses, found_shapes, found_flags = class_facts(
            path, f"{modname}.{node.name}", methods, load, mentions, text
        )
        uses.extend(found_uses)
        shapes.extend(found_shapes)
        flags.extend(found_flags)
    return tuple(uses), tuple(shapes), tuple(flags)
