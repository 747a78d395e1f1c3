"""Small, pure helpers over libcst nodes shared by the file analysers."""

from __future__ import annotations

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

    def visit(node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return
        if isinstance(node, cst.SimpleStatementLine):
            ordered.extend(node.body)
            return
        if isinstance(node, cst.BaseCompoundStatement):
            ordered.append(node)
        for child in child_nodes(node):
            if isinstance(child, (cst.BaseSuite, cst.BaseStatement, cst.Else, cst.ExceptHandler, cst.Finally, cst.If, cst.SimpleStatementLine)):
                visit(child)
            elif isinstance(child, cst.BaseSmallStatement):
                ordered.append(child)

    visit(body)
    return ordered


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


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Direct children that can hold code (whitespace and punctuation skipped)."""
    out: list[cst.CSTNode] = []
    for name in _fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            out.append(value)
        elif isinstance(value, (list, tuple)):
            out.extend(v for v in value if isinstance(v, cst.CSTNode))
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


class _Position:
    __slots__ = ("line", "column")

    def __init__(self, line: int, column: int) -> None:
        self.line, self.column = line, column


class _Range:
    __slots__ = ("start", "end")

    def __init__(self, raw: tuple[int, int, int, int]) -> None:
        self.start = _Position(raw[0], raw[1])
        self.end = _Position(raw[2], raw[3])


class Positions:
    """Syntactic line/column ranges of every node, like libcst's PositionProvider, at a
    fraction of its cost: one code generation that tracks lines with plain tuples."""

    def __init__(self, module: cst.Module) -> None:
        from contextlib import contextmanager

        from libcst._nodes.internal import CodegenState

        computed: dict[cst.CSTNode, tuple[int, int, int, int]] = {}
        stack: list[tuple[int, int]] = []

        class _State(CodegenState):  # type: ignore[misc]
            __slots__ = ("line", "column")

            def __init__(self) -> None:
                super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
                self.line = 1
                self.column = 0

            def _advance(self, value: str) -> None:
                newlines = value.count("\n")
                if newlines:
                    self.line += newlines
                    self.column = len(value) - value.rfind("\n") - 1
                else:
                    self.column += len(value)

            def add_indent_tokens(self) -> None:
                for token in self.indent_tokens:
                    self._advance(token)

            def add_token(self, value: str) -> None:
                self._advance(value)

            def pop_trailing_newline(self) -> None:
                pass

            def before_codegen(self, node: cst.CSTNode) -> None:
                stack.append((self.line, self.column))

            def after_codegen(self, node: cst.CSTNode) -> None:
                start = stack.pop()
                if node not in computed:
                    computed[node] = (start[0], start[1], self.line, self.column)

            @contextmanager
            def record_syntactic_position(self, node, *, start_node=None, end_node=None):
                start = (self.line, self.column)
                try:
                    yield
                finally:
                    end = (self.line, self.column)
                    if start_node is not None and start_node in computed:
                        start = computed[start_node][:2]
                    if end_node is not None and end_node in computed:
                        end = computed[end_node][2:]
                    computed[node] = (start[0], start[1], end[0], end[1])

        module._codegen(_State())
        self._computed = computed

    def __getitem__(self, node: cst.CSTNode) -> _Range:
        return _Range(self._computed[node])


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
                handlers[1](self, current)  # type: ignore[operator]
                continue
            if handlers[0] is not None and handlers[0](self, current) is False:  # type: ignore[operator]
                continue
            if handlers[1] is not None:
                stack.append((current, True))
            children = child_nodes(current)
            for child in reversed(children):
                stack.append((child, False))
