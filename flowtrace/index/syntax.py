"""Small, pure helpers over libcst nodes shared by the file analysers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst


def module_name(path: str) -> str:
    """``a/b/c.py`` -> ``a.b.c``; ``a/b/__init__.py`` -> ``a.b``."""
    parts = path[:-3].split("/") if path.endswith(".py") else path.split("/")
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(p for p in parts if p)


def dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


def last_name(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def names_in(node: cst.CSTNode) -> set[str]:
    """All plain names an expression mentions."""
    return {n.value for n in iter_nodes(node) if isinstance(n, cst.Name)}


def canonical(text: str) -> str:
    """One-line canonical source for an expression (``ast.unparse``), or the text itself."""
    import ast

    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return " ".join(text.split())


def clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def walk_statements(body: cst.CSTNode) -> list[cst.CSTNode]:
    """Every small and compound statement under ``body`` in source order, without
    descending into nested functions or classes (their bodies are not this function's)."""
    ordered: list[cst.CSTNode] = []
    _statements_into(body, ordered)
    return ordered


def _statements_into(node: cst.CSTNode, ordered: list[cst.CSTNode]) -> None:
    """:func:`walk_statements`' recursion, at module level: a nested recursive function is a
    reference cycle that would keep the statements (and the tree) alive until the cyclic GC."""
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return
    if isinstance(node, cst.SimpleStatementLine):
        ordered.extend(node.body)
        return
    if isinstance(node, cst.BaseCompoundStatement):
        ordered.append(node)
    for child in child_nodes(node):
        if isinstance(child, (cst.BaseSuite, cst.BaseStatement, cst.Else, cst.ExceptHandler, cst.Finally, cst.If, cst.SimpleStatementLine)):
            _statements_into(child, ordered)
        elif isinstance(child, cst.BaseSmallStatement):
            ordered.append(child)


def body_statements(suite: cst.BaseSuite) -> list[cst.BaseStatement | cst.BaseSmallStatement]:
    """The direct statements of a block, small statements unpacked from their lines."""
    out: list = []
    if isinstance(suite, cst.SimpleStatementSuite):
        return list(suite.body)
    for stmt in suite.body:  # type: ignore[attr-defined]
        if isinstance(stmt, cst.SimpleStatementLine):
            out.extend(stmt.body)
        else:
            out.append(stmt)
    return out


# -- fast traversal -------------------------------------------------------------
# libcst's visitor protocol rebuilds every node it passes (it is shared with transformers),
# which costs several times the parse itself. Facts only need to read the tree, so these
# helpers walk the dataclass fields directly.

_FIELDS: dict[type, tuple[str, ...]] = {}
_SKIP = {"whitespace", "lpar", "rpar", "leading_lines", "lines_after_decorators", "header", "footer", "semicolon", "comma", "newline"}


def _fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        import dataclasses

        names = tuple(
            f.name for f in dataclasses.fields(kind) if not f.name.startswith("whitespace") and f.name not in _SKIP
        )
        _FIELDS[kind] = names
    return names


# What a field value is, by its type: 1 a node, 2 a list or tuple (of nodes, maybe), 0 else.
# Cached per type because ``isinstance(x, cst.CSTNode)`` goes through ABCMeta each time.
_KINDS: dict[type, int] = {}


def _kind(kind: type) -> int:
    value = 1 if issubclass(kind, cst.CSTNode) else 2 if issubclass(kind, (list, tuple)) else 0
    _KINDS[kind] = value
    return value


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Direct children that can hold code (whitespace and punctuation skipped)."""
    out: list[cst.CSTNode] = []
    kinds = _KINDS
    for name in _fields(type(node)):
        value = getattr(node, name)
        kind = kinds.get(type(value))
        if kind is None:
            kind = _kind(type(value))
        if kind == 1:
            out.append(value)
        elif kind == 2:
            for item in value:
                item_kind = kinds.get(type(item))
                if item_kind is None:
                    item_kind = _kind(type(item))
                if item_kind == 1:
                    out.append(item)
    return out


def iter_nodes(node: cst.CSTNode, *, into_functions: bool = True):
    """Every node below ``node`` (pre-order), optionally not entering nested defs."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if not into_functions and current is not node and isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        children = child_nodes(current)
        children.reverse()
        stack.extend(children)


def visit_each(node: cst.CSTNode, handlers: dict[type, Callable[[Any], None]]) -> None:
    """Call ``handlers[type(n)](n)`` for ``node`` and every node below it, in pre-order (what a
    :class:`FastVisitor` with only ``visit_`` methods does). For one-off walks inside a
    function: a visitor class made per call is a reference cycle with its closures, which
    keeps the nodes they reach (often the whole tree) alive until the cyclic GC runs."""
    get = handlers.get
    for current in iter_nodes(node):
        handler = get(type(current))
        if handler is not None:
            handler(current)


class _Position:
    __slots__ = ("line", "column")

    def __init__(self, line: int, column: int) -> None:
        self.line, self.column = line, column


class _Range:
    __slots__ = ("start", "end")

    def __init__(self, raw: tuple[int, int, int, int]) -> None:
        self.start = _Position(raw[0], raw[1])
        self.end = _Position(raw[2], raw[3])


# Positions come from one code generation that only logs, in order, what libcst hands the
# state (tokens, nodes entering and leaving, syntactic-position regions opening and closing);
# one plain loop then turns the log into line/column ranges. Logging with ``list.append``
# instead of a Python method per token and per node, and parenthesizing without a generator
# context manager, is what makes it cheap; the ranges are the ones libcst's PositionProvider
# semantics give (start/end nodes of a region, first record wins for a node).


class _Region:
    """A ``record_syntactic_position`` region opening (its closing is :data:`_CLOSE`)."""

    __slots__ = ("node", "start_node", "end_node")

    def __init__(self, node: cst.CSTNode, start_node: cst.CSTNode | None, end_node: cst.CSTNode | None) -> None:
        self.node, self.start_node, self.end_node = node, start_node, end_node


class _Close:
    __slots__ = ()


_CLOSE = _Close()


class _RegionContext:
    """What ``record_syntactic_position`` returns: leaving logs the region's close."""

    __slots__ = ("push",)

    def __init__(self, push) -> None:  # noqa: ANN001
        self.push = push

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self.push(_CLOSE)


class _Parenthesize:
    """``_BaseParenthesizedNode._parenthesize`` (lpar, syntactic region, rpar) as a plain
    context manager instead of a ``@contextmanager`` generator; same calls, same order."""

    __slots__ = ("node", "state", "inner")

    def __init__(self, node, state) -> None:  # noqa: ANN001
        self.node, self.state = node, state

    def __enter__(self) -> None:
        for lpar in self.node.lpar:
            lpar._codegen(self.state)
        self.inner = self.state.record_syntactic_position(self.node)
        self.inner.__enter__()

    def __exit__(self, kind, value, traceback) -> bool:  # noqa: ANN001
        if self.inner.__exit__(kind, value, traceback):
            return True
        if kind is None:
            for rpar in self.node.rpar:
                rpar._codegen(self.state)
        return False


def _fast_parenthesize(self, state):  # noqa: ANN001
    return _Parenthesize(self, state)


_STATE_CLASS: list[type] = []


def _state_class() -> type:
    """The code generator's state that only logs (built once: a class made per file would
    hold the file's log, so its whole tree, in a reference cycle until the cyclic GC ran)."""
    if _STATE_CLASS:
        return _STATE_CLASS[0]
    from libcst._nodes.internal import CodegenState

    class _LoggingState(CodegenState):  # type: ignore[misc]
        def __init__(self, module: cst.Module, log: list) -> None:
            super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
            push = log.append
            # instance attributes shadow the methods: one C call per token and node
            self.add_token = push  # type: ignore[method-assign, assignment]
            self.before_codegen = push  # type: ignore[method-assign, assignment]
            self.after_codegen = push  # type: ignore[method-assign, assignment]
            self._log = log
            self._region_context = _RegionContext(push)

        def add_indent_tokens(self) -> None:
            self._log.extend(self.indent_tokens)

        def pop_trailing_newline(self) -> None:
            pass

        def record_syntactic_position(self, node, *, start_node=None, end_node=None):  # noqa: ANN001
            self._log.append(_Region(node, start_node, end_node))
            return self._region_context

    _STATE_CLASS.append(_LoggingState)
    return _LoggingState


# Nodes that are only whitespace or comments: no fact asks where they are, and they are a
# third of what the code generation logs, so it generates them without logging them
# (``Positions[node]`` raises KeyError for them; their text still moves the lines on).
UNPOSITIONED: tuple[type[cst.CSTNode], ...] = (cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace, cst.Newline, cst.EmptyLine, cst.Comment)


def _unlogged_codegen(self, state, **kwargs) -> None:  # noqa: ANN001, ANN003
    """``CSTNode._codegen`` without ``before_codegen`` / ``after_codegen``."""
    self._codegen_impl(state, **kwargs)


class Positions:
    """Syntactic line/column ranges of every node, like libcst's PositionProvider, at a
    fraction of its cost: one code generation that tracks lines with plain tuples."""

    def __init__(self, module: cst.Module) -> None:
        import threading

        from libcst._nodes.expression import _BaseParenthesizedNode

        log: list = []
        original = _BaseParenthesizedNode.__dict__.get("_parenthesize")
        patch = original is not None and threading.current_thread() is threading.main_thread()
        quiet = [k for k in UNPOSITIONED if "_codegen" not in k.__dict__] if patch else []
        if patch:
            _BaseParenthesizedNode._parenthesize = _fast_parenthesize  # type: ignore[method-assign]
        for kind in quiet:
            kind._codegen = _unlogged_codegen  # type: ignore[method-assign, assignment]
        try:
            module._codegen(_state_class()(module, log))
        finally:
            for kind in quiet:
                del kind._codegen  # back to CSTNode's
            if patch:
                _BaseParenthesizedNode._parenthesize = original  # type: ignore[method-assign, assignment]

        computed: dict[int, tuple[int, int, int, int]] = {}
        line, column = 1, 0
        open_nodes: list[tuple[cst.CSTNode, int, int]] = []
        open_regions: list[tuple[_Region, int, int]] = []
        top = None  # the innermost node being generated: seeing it again means it ended
        for entry in log:
            kind = type(entry)
            if kind is str:
                newlines = entry.count("\n")
                if newlines:
                    line += newlines
                    column = len(entry) - entry.rfind("\n") - 1
                else:
                    column += len(entry)
            elif kind is _Region:
                open_regions.append((entry, line, column))
            elif kind is _Close:
                region, start_line, start_column = open_regions.pop()
                end_line, end_column = line, column
                if region.start_node is not None:
                    known = computed.get(id(region.start_node))
                    if known is not None:
                        start_line, start_column = known[0], known[1]
                if region.end_node is not None:
                    known = computed.get(id(region.end_node))
                    if known is not None:
                        end_line, end_column = known[2], known[3]
                computed[id(region.node)] = (start_line, start_column, end_line, end_column)
            elif entry is top:
                node, start_line, start_column = open_nodes.pop()
                if id(node) not in computed:
                    computed[id(node)] = (start_line, start_column, line, column)
                top = open_nodes[-1][0] if open_nodes else None
            elif isinstance(entry, str):  # a token of a str subclass
                newlines = entry.count("\n")
                if newlines:
                    line += newlines
                    column = len(entry) - entry.rfind("\n") - 1
                else:
                    column += len(entry)
            else:
                open_nodes.append((entry, line, column))
                top = entry
        self._module = module  # keeps every node (and so every id above) alive
        self._computed = computed

    def __getitem__(self, node: cst.CSTNode) -> _Range:
        return _Range(self._computed[id(node)])


class FastVisitor:
    """libcst's ``visit_<Node>`` / ``leave_<Node>`` protocol over :func:`child_nodes`,
    read-only and iterative (no node rebuilding, no recursion limit)."""

    _handlers: dict[type, tuple[object, object]]

    def walk(self, node: cst.CSTNode) -> None:
        cache = self.__class__.__dict__.get("_handler_cache")
        if cache is None:
            cache = {}
            setattr(self.__class__, "_handler_cache", cache)
        stack: list[tuple[cst.CSTNode, bool]] = [(node, False)]
        while stack:
            current, leaving = stack.pop()
            kind = type(current)
            handlers = cache.get(kind)
            if handlers is None:
                handlers = (getattr(self.__class__, f"visit_{kind.__name__}", None), getattr(self.__class__, f"leave_{kind.__name__}", None))
                cache[kind] = handlers
            if leaving:
                handlers[1](self, current)  # type: ignore[operator, misc]
                continue
            if handlers[0] is not None and handlers[0](self, current) is False:  # type: ignore[operator]
                continue
            if handlers[1] is not None:
                stack.append((current, True))
            children = child_nodes(current)
            for child in reversed(children):
                stack.append((child, False))
