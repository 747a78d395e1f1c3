"""Small, pure helpers over stdlib ``ast`` nodes shared by the file analysers.

The analysers read the tree the pre-screen already built (:func:`flowtrace.index.parse._screen`),
so a file is parsed once. What libcst gave them that ``ast`` does not, this module gives:
call arguments in source order with their keyword or star (:func:`arguments`), parameters
with their defaults (:func:`parameters`), and a node's exact source text (:class:`SourceText`).
"""

from __future__ import annotations

import ast
import bisect
import keyword
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_SCOPES_AND_LAMBDAS = (*_SCOPES, ast.Lambda)
_SCOPES_SET = frozenset(_SCOPES)


def module_name(path: str, package: str = "") -> str:
    """``a/b/c.py`` -> ``a.b.c``; ``a/b/__init__.py`` -> ``a.b``; with ``package`` (the
    scanned folder is itself that package: ``engines.profiles.root_package``) -> ``package.a.b.c``."""
    parts = path[:-3].split("/") if path.endswith(".py") else path.split("/")
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(p for p in (*package.split("."), *parts) if p)


def dotted(node: ast.AST | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def last_name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def is_name(node: ast.AST | None, name: str | None = None) -> bool:
    """``node`` is a plain name (``name``, when given)."""
    return isinstance(node, ast.Name) and (name is None or node.id == name)


def string_value(node: ast.AST | None) -> str | None:
    """The value of a string literal (not an f-string), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def int_value(node: ast.AST | None) -> int | None:
    """The value of a non-negative integer literal (``True`` is not one), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def names_in(node: ast.AST) -> set[str]:
    """All plain names an expression mentions."""
    return {n.id for n in iter_nodes(node) if isinstance(n, ast.Name)}


def canonical(text: str) -> str:
    """One-line canonical source for an expression (``ast.unparse``), or the text itself."""
    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return " ".join(text.split())


def clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decode(data: bytes, *, strict: bool = False) -> str:
    """Source text for line-based work (suppressions), honouring a BOM or a coding cookie.
    ``strict``: raise UnicodeDecodeError for bytes the file's encoding cannot decode (the
    interpreter refuses such a file, although ``ast.parse`` accepts them inside a comment)."""
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding, errors="strict" if strict else "replace")
    except (SyntaxError, LookupError):
        return data.decode("utf-8", errors="strict" if strict else "replace")


# A node, or a block of them (a statement list, say): what the walks below start from.
NodeOrBlock = ast.AST | list[ast.stmt] | list[ast.expr] | list[ast.AST]


# -- statements -------------------------------------------------------------------------
def walk_statements(body: ast.AST | list[ast.stmt]) -> list[ast.stmt]:
    """Every statement under ``body`` (a statement list, or a node whose blocks to read) in
    source order, a compound statement before the statements it holds, without entering
    nested functions or classes (their bodies are not this function's; the nested
    definition itself is left out too)."""
    ordered: list[ast.stmt] = []
    if isinstance(body, list):
        _statements_into(body, ordered)
    elif isinstance(body, _SCOPES):
        _statements_into(body.body, ordered)
    else:
        _statements_into([body], ordered)  # type: ignore[list-item]  # one statement node, in practice
    return ordered


def _statements_into(block: list[ast.stmt], ordered: list[ast.stmt]) -> None:
    """:func:`walk_statements`' recursion, at module level (a nested recursive function is a
    reference cycle that would keep the tree alive until the cyclic GC)."""
    for stmt in block:
        if isinstance(stmt, _SCOPES):
            continue
        ordered.append(stmt)
        for inner in inner_blocks(stmt):
            _statements_into(inner, ordered)


def inner_blocks(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statement lists a compound statement holds, in source order (an ``except``
    clause's or a ``case``'s body in its place); none for a simple statement or a definition."""
    for name in BLOCK_FIELDS.get(type(stmt), ()):
        inner = getattr(stmt, name)
        if name == "handlers" or name == "cases":
            for clause in inner:
                yield clause.body
        else:
            yield inner


BLOCK_FIELDS: dict[type, tuple[str, ...]] = {
    ast.If: ("body", "orelse"),
    ast.For: ("body", "orelse"),
    ast.AsyncFor: ("body", "orelse"),
    ast.While: ("body", "orelse"),
    ast.With: ("body",),
    ast.AsyncWith: ("body",),
    ast.Try: ("body", "handlers", "orelse", "finalbody"),
    ast.Match: ("cases",),
}
if hasattr(ast, "TryStar"):  # Python 3.11
    BLOCK_FIELDS[ast.TryStar] = ("body", "handlers", "orelse", "finalbody")


def all_statements(block: list[ast.stmt]) -> list[ast.stmt]:
    """Every statement under ``block``, nested definitions' bodies included (no expression is
    visited: a statement walk costs a fraction of ``ast.walk``). Order: by blocks, not source."""
    out: list[ast.stmt] = []
    pending = [block]
    while pending:
        for stmt in pending.pop():
            out.append(stmt)
            kind = type(stmt)
            if kind in _SCOPES_SET:
                pending.append(stmt.body)  # type: ignore[attr-defined]
            else:
                pending.extend(inner_blocks(stmt))
    return out


Position = tuple[int, int]


def start_of(node: ast.AST) -> Position:
    """(line, column) where a node starts. Columns are UTF-8 byte offsets, which order the
    nodes of one line as character columns do (``SourceText`` converts where text is cut)."""
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def end_of(node: ast.AST) -> Position:
    return node.end_lineno, node.end_col_offset  # type: ignore[attr-defined]


# -- calls and parameters ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a call as written: ``value``, its ``keyword`` (None when positional),
    ``star`` ("", "*" or "**"), and ``node``, the node that starts where the argument does
    (the keyword's, a starred value's, or the value itself)."""

    value: ast.expr
    keyword: str | None
    star: str
    node: ast.AST


def arguments(call: ast.Call) -> list[Arg]:
    """A call's arguments in source order (``ast`` keeps positional and keyword apart).
    ``*x`` and ``**x`` count as positional (no keyword), as in the grammar's argument list."""
    out = [Arg(a.value, None, "*", a) if isinstance(a, ast.Starred) else Arg(a, None, "", a) for a in call.args]
    if call.keywords:
        out += [Arg(k.value, k.arg, "" if k.arg is not None else "**", k) for k in call.keywords]
        if call.args and _after(call.args[-1], call.keywords[0]):
            out.sort(key=lambda a: (a.node.lineno, a.node.col_offset))  # type: ignore[attr-defined]
    return out


def _after(first: ast.AST, second: ast.AST) -> bool:
    return (first.lineno, first.col_offset) > (second.lineno, second.col_offset)  # type: ignore[attr-defined]


def positional(call: ast.Call) -> list[Arg]:
    """The arguments without a keyword (``*x`` and ``**x`` included), in order."""
    return [a for a in arguments(call) if a.keyword is None]


def keyword_args(call: ast.Call) -> dict[str, ast.expr]:
    """``name=value`` arguments by name."""
    return {k.arg: k.value for k in call.keywords if k.arg is not None}


@dataclass(frozen=True, slots=True)
class Param:
    """One named parameter: ``name``, ``default`` (None when it has none), ``node`` (the
    ``ast.arg``, where the parameter is written)."""

    name: str
    default: ast.expr | None
    node: ast.arg


def parameters(fn: FunctionNode | ast.Lambda, *, kwonly: bool = False, posonly: bool = False) -> list[Param]:
    """The regular positional-or-keyword parameters, in order; ``kwonly`` adds the keyword-only
    ones after them, ``posonly`` puts the positional-only ones first. ``*args`` / ``**kw`` never."""
    args = fn.args
    ordered = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(ordered) - len(args.defaults)) + list(args.defaults)
    out = [Param(a.arg, d, a) for a, d in zip(ordered, defaults)]
    if not posonly:
        out = out[len(args.posonlyargs) :]
    if kwonly:
        out += [Param(a.arg, d, a) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return out


def parameter_names(fn: FunctionNode | ast.Lambda) -> list[str]:
    """The regular positional-or-keyword parameter names, in order."""
    return [a.arg for a in fn.args.args]


# -- traversal -----------------------------------------------------------------------------
# Per node class, the fields that can hold child nodes, in source order: a decorated
# definition's decorators first; contexts and operators (``ctx``, ``op``, ``ops``) and plain
# values (names, numbers, flags, strings) never, so they are not even looked at.
_LEAF_FIELDS = frozenset(
    {
        "ctx",
        "op",
        "ops",
        "type_comment",
        "name",
        "id",
        "attr",
        "arg",
        "module",
        "level",
        "kind",
        "is_async",
        "conversion",
        "rest",
        "tag",
        "kwd_attrs",
    }
)
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {ast.Constant: ()}
_DECORATED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def child_fields(kind: type) -> tuple[str, ...]:
    """The fields of ``kind`` that can hold child nodes, in :func:`child_nodes`' order (read
    once per class), for walks that read them without a call and a list per node."""
    names = _CHILD_FIELDS.get(kind)
    if names is None:
        names = tuple(f for f in kind._fields if f not in _LEAF_FIELDS)  # type: ignore[attr-defined]
        if kind in _DECORATED:
            names = ("decorator_list", *(f for f in names if f != "decorator_list"))
        _CHILD_FIELDS[kind] = names
    return names


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """Direct children in source order (operators and contexts left out): a ``Dict``'s keys
    and values interleaved, a call's keywords merged with its positional arguments, a
    decorated definition's decorators first."""
    kind = node.__class__
    if kind is ast.Call:
        call: ast.Call = node  # type: ignore[assignment]
        args, keywords = call.args, call.keywords
        if not keywords:
            return [call.func, *args]
        if args and _after(args[-1], keywords[0]):  # f(a=1, *rest): in source order
            return [call.func, *sorted([*args, *keywords], key=_position)]
        return [call.func, *args, *keywords]
    if kind is ast.Dict:
        out: list[ast.AST] = []
        for key, value in zip(node.keys, node.values):  # type: ignore[attr-defined]
            if key is not None:
                out.append(key)
            out.append(value)
        return out
    out = []
    node_type, lst = ast.AST, list
    fields = _CHILD_FIELDS.get(kind)
    for name in fields if fields is not None else child_fields(kind):
        value = getattr(node, name, None)
        if value.__class__ is lst:
            out.extend([item for item in value if isinstance(item, node_type)])
        elif isinstance(value, node_type):
            out.append(value)
    return out


def _position(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def iter_nodes(node: NodeOrBlock, *, into_functions: bool = True) -> Iterator[ast.AST]:
    """Every node at or below ``node`` (a node, or a statement list), pre-order in source
    order, optionally not entering nested definitions and lambdas (which are still yielded)."""
    stack: list[ast.AST] = list(reversed(node)) if isinstance(node, list) else [node]
    first = None if isinstance(node, list) else node
    while stack:
        current = stack.pop()
        yield current
        if not into_functions and current is not first and isinstance(current, _SCOPES_AND_LAMBDAS):
            continue
        children = child_nodes(current)
        children.reverse()
        stack.extend(children)


def visit_each(node: NodeOrBlock, handlers: dict[type, Callable[[Any], None]]) -> None:
    """Call ``handlers[type(n)](n)`` for ``node`` and every node below it, in pre-order
    (:func:`iter_nodes`' order, without its generator).

    The children are pushed here rather than through :func:`child_nodes` (which a ``Call``
    and a ``Dict`` still take, for their source order): most nodes of a walk are leaves
    (names, constants) or hold one child, and a call plus a list per node was most of the
    cost of the per-``__init__`` walks of the class table."""
    get, fields_of, special = handlers.get, _REVERSED_FIELDS.get, SOURCE_ORDERED
    stack: list[ast.AST] = list(reversed(node)) if isinstance(node, list) else [node]
    pop, push, extend, node_type, lst = stack.pop, stack.append, stack.extend, ast.AST, list
    while stack:
        current = pop()
        kind = current.__class__
        handler = get(kind)
        if handler is not None:
            handler(current)
        fields = fields_of(kind)
        if fields is None:
            fields = _reversed_fields(kind)
        if not fields:
            continue
        if kind in special:
            children = child_nodes(current)
            children.reverse()
            extend(children)
            continue
        for name in fields:  # the last field first: the stack pops the first child first
            value = getattr(current, name, None)
            if value.__class__ is lst:
                extend([item for item in reversed(value) if isinstance(item, node_type)])
            elif isinstance(value, node_type):
                push(value)


# Per node class, :func:`child_nodes`' fields last first (for :func:`visit_each`'s stack);
# the classes whose children child_nodes puts in source order across fields (a walk reading
# child_fields itself takes child_nodes for these).
_REVERSED_FIELDS: dict[type, tuple[str, ...]] = {}
SOURCE_ORDERED = frozenset({ast.Call, ast.Dict})


def _reversed_fields(kind: type) -> tuple[str, ...]:
    fields = _REVERSED_FIELDS[kind] = tuple(reversed(child_fields(kind)))
    return fields


# -- source text ------------------------------------------------------------------------------
class SourceText:
    """A file's lines, and the exact source of a node (``ast`` columns are UTF-8 byte offsets;
    lines are split as the parser splits them)."""

    __slots__ = ("lines", "_encoded", "_tree")

    def __init__(self, source: str, tree: ast.Module | None = None) -> None:
        self.lines = _parser_lines(source)
        self._encoded: dict[int, bytes] = {}
        self._tree = tree  # for the block a multi-line node stands in

    def line_text(self, number: int) -> str:
        return self.lines[number - 1] if 0 < number <= len(self.lines) else ""

    def segment(self, node: ast.AST) -> str:
        """The node's source as if it stood alone: from its first to its last character, its
        own grouping parentheses included (``(a\n if c else b)``; a call's are not the
        argument's), a definition's decorators too, and later lines without the indentation
        of the first line's block (lines inside a string literal kept as written)."""
        first = getattr(node, "lineno", None)
        if first is None:
            return ""
        if isinstance(node, _DECORATED) and node.decorator_list:
            decorator = node.decorator_list[0]  # its span starts after the "@"
            first = decorator.lineno
            start = max(self.line_text(first).rfind("@", 0, self._column(first, decorator.col_offset)), 0)
        else:
            start = self._column(first, node.col_offset)  # type: ignore[attr-defined]
        last = node.end_lineno or first  # type: ignore[attr-defined]
        end = self._column(last, node.end_col_offset)  # type: ignore[attr-defined]
        if isinstance(node, ast.expr):
            first, start, last, end = self._grouped(first, start, last, end)
        if first == last:
            return self.line_text(first)[start:end]
        tail = self.line_text(last)
        if isinstance(node, _COMPOUND) and tail[end:].lstrip().startswith("#"):
            end = len(tail)  # a block's last comment is the block's
        parts = [*self.lines[first : last - 1], tail[:end]]
        head = self.line_text(first)
        indent = (
            self._block_indent(first, head)
            if isinstance(node, ast.expr)
            else head[: len(head) - len(head.lstrip(" \t"))]
        )
        if indent:
            verbatim = _string_lines(node) if any(q in p for p in parts for q in _QUOTES) else frozenset()
            cut = len(indent)
            parts = [
                p[cut:] if p.startswith(indent) and n not in verbatim else p for n, p in enumerate(parts, first + 1)
            ]
        return "\n".join([head[start:], *parts])

    def _block_indent(self, line: int, text: str) -> str:
        """The indentation of the innermost statement holding ``line`` (the line's own
        indentation when the tree is unknown or no statement holds it)."""
        own = text[: len(text) - len(text.lstrip(" \t"))]
        if self._tree is None:
            return own
        first = _holder_line(self._tree.body, line)
        if first is None:
            return own
        statement_line = self.line_text(first)
        return statement_line[: len(statement_line) - len(statement_line.lstrip(" \t"))]

    def _grouped(self, first: int, start: int, last: int, end: int) -> tuple[int, int, int, int]:
        """The span widened over each pair of parentheses that only groups it."""
        while True:
            before = self._before(first, start)
            after = self._after(last, end)
            if before is None or after is None:
                return first, start, last, end
            (first, start), (last, end) = before, after

    def _before(self, line: int, column: int) -> tuple[int, int] | None:
        """Where an opening grouping parenthesis just before (line, column) starts, else None."""
        text = self.line_text(line)[:column].rstrip()
        while not text and line > 1:
            line -= 1
            text = self.line_text(line).rstrip()
        if not text.endswith("("):
            return None
        ahead = text[:-1].rstrip()
        if ahead and (
            ahead[-1] in ")]\"'"
            or (ahead[-1].isalnum() or ahead[-1] == "_")
            and not keyword.iskeyword(_last_word(ahead))
        ):
            return None  # a call's or a subscript's parenthesis, not a group's
        return line, len(text) - 1

    def _after(self, line: int, column: int) -> tuple[int, int] | None:
        """Where a closing parenthesis just after (line, column) ends, else None."""
        text = self.line_text(line)[column:]
        offset = column + len(text) - len(text.lstrip())
        while not text.strip() and line < len(self.lines):
            line += 1
            text = self.line_text(line)
            offset = len(text) - len(text.lstrip())
        return (line, offset + 1) if text.strip().startswith(")") else None

    def _column(self, line: int, offset: int | None) -> int:
        """The character column of a UTF-8 byte ``offset`` on ``line``."""
        text = self.line_text(line)
        if offset is None:
            return len(text)
        if text.isascii():
            return offset
        encoded = self._encoded.get(line)
        if encoded is None:
            encoded = self._encoded[line] = text.encode("utf-8", "surrogatepass")
        return len(encoded[:offset].decode("utf-8", "replace"))

    def character_column(self, node: ast.AST) -> int:
        """The node's start column in characters."""
        return self._column(node.lineno, node.col_offset)  # type: ignore[attr-defined]


def _holder_line(block: list[ast.stmt], line: int) -> int | None:
    """The last first line of the statements (those of :func:`all_statements`) that hold
    ``line``, None when none does. Only the statements holding it are entered (a statement's
    own statements lie within its lines), each block found by bisection: the statements of a
    block follow each other, so those holding ``line`` are the last ones starting at or before
    it, back to the first that ends before it."""
    best: int | None = None
    pending = [block]
    while pending:
        statements = pending.pop()
        at = bisect.bisect_right(statements, line, key=_first_of)
        while at:
            at -= 1
            stmt = statements[at]
            if (stmt.end_lineno or stmt.lineno) < line:
                break
            if best is None or stmt.lineno > best:
                best = stmt.lineno
            if type(stmt) in _SCOPES_SET:
                pending.append(stmt.body)  # type: ignore[attr-defined]
            else:
                pending.extend(inner_blocks(stmt))
    return best


def _first_of(stmt: ast.stmt) -> int:
    return stmt.lineno


_COMPOUND = (*_DECORATED, *BLOCK_FIELDS)
_QUOTES = ('"""', "'''")


def _last_word(text: str) -> str:
    i = len(text)
    while i and (text[i - 1].isalnum() or text[i - 1] == "_"):
        i -= 1
    return text[i:]


def _string_lines(node: ast.AST) -> frozenset[int]:
    """Lines inside a multi-line string literal under ``node`` (after its first line)."""
    inside: set[int] = set()
    for child in ast.walk(node):
        if isinstance(child, (ast.Constant, ast.JoinedStr)) and child.end_lineno and child.end_lineno > child.lineno:
            inside.update(range(child.lineno + 1, child.end_lineno + 1))
    return frozenset(inside)


def _parser_lines(source: str) -> list[str]:
    """Lines as the parser numbers them: ``\\n``, ``\\r\\n`` and ``\\r`` end a line; form feeds
    and other separators ``str.splitlines`` breaks at do not."""
    if "\r" not in source and not any(c in source for c in "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"):
        return source.split("\n")
    return source.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def find_all(text: str, word: str) -> list[int]:
    """Every offset where ``word`` starts in ``text``, overlapping ones included."""
    out: list[int] = []
    at = text.find(word)
    while at >= 0:
        out.append(at)
        at = text.find(word, at + 1)
    return out


def line_numbers(text: str, offsets: list[int]) -> list[int]:
    """The (1-based, ascending, distinct) numbers of the lines of ``text`` (lines ended by
    ``\n`` alone) the ``offsets`` fall in, by counting line breaks between them: cheaper than
    splitting a file into lines when few offsets are asked about."""
    numbers: list[int] = []
    line, previous = 1, 0
    for at in sorted(set(offsets)):
        line += text.count("\n", previous, at)
        previous = at
        if not numbers or numbers[-1] != line:
            numbers.append(line)
    return numbers


__all__ = [
    "Arg",
    "FunctionNode",
    "Param",
    "SourceText",
    "Position",
    "SOURCE_ORDERED",
    "all_statements",
    "arguments",
    "canonical",
    "child_fields",
    "child_nodes",
    "clip",
    "decode",
    "dotted",
    "end_of",
    "find_all",
    "int_value",
    "is_name",
    "iter_nodes",
    "keyword_args",
    "last_name",
    "line_numbers",
    "module_name",
    "names_in",
    "parameter_names",
    "parameters",
    "positional",
    "start_of",
    "string_value",
    "visit_each",
    "walk_statements",
]
