"""What libcst must see of a file: the file itself, line for line, minus dull function bodies.

libcst (parse, then a code generation for positions) costs about ten times the stdlib
parser, and most of a 3,000-line model or runner file is methods that can yield no fact:
no profile name, no concatenation, no config key in them. The stdlib pre-screen already has
the file's tree, so it picks those bodies and each is replaced, *on the same lines*, by a
string-literal stub (one triple-quoted string spanning the body's lines), keeping only the body's import
statements (imports anywhere count). Everything else stays byte for byte where it was:
module code, class headers and bodies, decorators, every ``def`` line (a class's method
list), and every function that may matter. Line numbers and columns of every kept node are
therefore those of the file, and the analysers, which read the original text for their
substring gates and source lines, produce the same facts (tests compare full-file and
span facts on every fixture file and on real trees).

A body is kept whole when the lines from the end of the previous statement to the start of
the next one (comments around it included) name any word of the profiles' conventions or a
concatenation, when its function is ``__init__``, a setter, a default getter or a
``forward*``, or when a kept method of the same class names it as ``self.<name>``.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import itertools
import re

from flowtrace.engines.profiles import Conventions

# Conventions fields whose words never make a function body matter on their own: matched only
# outside bodies (module-level registries, file paths, class bases) or only inside bodies kept
# for another reason (container methods and capture helpers: in a layer loop, kept for its
# layers attribute; fc attributes: in ``__init__``; pipeline guards: in setters; embedding
# attributes: in layer loops). The layers attribute itself counts only next to a ``for``.
_NOT_BODY_WORDS = {
    "digest", "dict_files", "dict_name_patterns", "dict_module_prefixes", "container_methods", "fc_attributes",
    "pp_guards", "embedding_attributes", "layers_attributes", "setter_order", "generation_dicts", "entry_variables",
}


@dataclasses.dataclass(frozen=True)
class _Search:
    """One word of a line gate, searched for on its own (see :func:`_hit_lines`)."""

    pattern: re.Pattern[bytes]
    word_start: bool = False  # not right after a word character: a leading ``\b``, checked here


# What the visitors match without a profile: a concatenation or an aux packer becomes a fact
# only when its text says "aux" (or names a profile attribute, a body word already).
_FIXED = (_Search(re.compile(rb"(?i:aux)")),)
# What class facts read from any method: ``if ...: raise`` checks, ``super().<name>(`` calls.
# Whole words; a leading ``\b`` in the pattern would cost the regex engine its literal search.
_METHOD_WORDS = (_Search(re.compile(rb"raise\b"), True), _Search(re.compile(rb"super\b"), True))
_WORD_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
# A method that returns a newly built class is a factory (``return Cls(...)``): checked on the
# tree for the methods whose text has a return and a capitalised call.
_MAYBE_FACTORY = re.compile(rb"\breturn\b[\s\S]*\b[A-Z][A-Za-z0-9_]*\s*\(")
_SELF_NAME = re.compile(rb"\b(?:self|cls)\.([A-Za-z_][A-Za-z0-9_]*)")
_STUB_MIN_LINES = 3  # shorter bodies are not worth a stub

_Gate = tuple[_Search, ...]
_PATTERNS: dict[str, tuple[_Gate, _Gate]] = {}


def _words(value: object, out: set[str]) -> None:
    if isinstance(value, str):
        out.update(part for part in re.split(r"[^A-Za-z0-9_]+", value) if part)
    elif isinstance(value, bytes):
        _words(value.decode("utf-8", "replace"), out)
    elif isinstance(value, (tuple, list, set, frozenset)):
        for item in value:
            _words(item, out)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _words(getattr(value, f.name), out)


def _alternation(words: set[str], extra: _Gate) -> _Gate:
    return tuple(_Search(re.compile(re.escape(w.encode()))) for w in sorted(words, key=len, reverse=True)) + extra


def body_patterns(conv: Conventions) -> tuple[_Gate, _Gate]:
    """(words that make a body matter, layers attributes that do so next to a ``for``),
    built once per profile set."""
    patterns = _PATTERNS.get(conv.digest)
    if patterns is None:
        words: set[str] = set()
        for f in dataclasses.fields(conv):
            if f.name not in _NOT_BODY_WORDS:
                _words(getattr(conv, f.name), words)
        layers: set[str] = set()
        _words(conv.layers_attributes, layers)
        patterns = (_alternation(words, _FIXED + _METHOD_WORDS), _alternation(layers, ()))
        _PATTERNS[conv.digest] = patterns
    return patterns


@dataclasses.dataclass
class _Function:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    first: int  # first line that may belong to it (after the previous statement)
    last: int  # last line that may belong to it (before the next statement)
    in_class: bool


class _Lines:
    """The file's lines with their endings, and which of them name a body word."""

    def __init__(self, data: bytes, patterns: tuple[_Gate, _Gate]) -> None:
        self.lines = data.splitlines(keepends=True)
        starts = list(itertools.accumulate(map(len, self.lines), initial=0))[:-1]  # each line's offset
        self.hits, self.layer_hits = (_hit_lines(data, starts, gate) for gate in patterns)

    def mentions(self, first: int, last: int) -> bool:
        """Whether lines ``first``..``last`` name a body word, or a layers attribute and ``for``."""
        if _within(self.hits, first, last):
            return True
        return _within(self.layer_hits, first, last) and b"for " in self.text(first, last)

    def text(self, first: int, last: int) -> bytes:
        return b"".join(self.lines[first - 1 : last])


def _hit_lines(data: bytes, starts: list[int], gate: _Gate) -> list[int]:
    """The lines (1-based; ``starts``: their offsets) where a word of ``gate`` starts.

    Each word is searched for on its own: a literal at the regex engine's literal-search speed,
    where one alternation of them all tries every word at every byte (three quarters of the
    span selection). The lines are those of the alternation: a word never spans a line break,
    so an occurrence the alternation skips (inside another match) starts on that match's line;
    a word checked for its start here (``raise``, ``super``) cannot overlap itself."""
    found: set[int] = set()
    word = _WORD_BYTES
    for search in gate:
        for match in search.pattern.finditer(data):
            at = match.start()
            if search.word_start and at and data[at - 1] in word:
                continue
            found.add(bisect.bisect_right(starts, at))
    return sorted(found)


def _within(hits: list[int], first: int, last: int) -> bool:
    i = bisect.bisect_left(hits, first)
    return i < len(hits) and hits[i] <= last


def _collect(body: list[ast.stmt], first: int, last: int, in_class: bool, classes: list, out: list[_Function]) -> None:
    """Functions directly in ``body`` (and in its if/try/with blocks), never inside a function;
    class bodies recurse, each class collecting its own methods."""
    for i, stmt in enumerate(body):
        start = body[i - 1].end_lineno + 1 if i else first  # type: ignore[operator]
        end = body[i + 1].lineno - 1 if i + 1 < len(body) else last
        if stmt.__class__ in (ast.FunctionDef, ast.AsyncFunctionDef):
            out.append(_Function(stmt, start, end, in_class))  # type: ignore[arg-type]
        elif stmt.__class__ is ast.ClassDef:
            methods: list[_Function] = []
            classes.append(methods)
            _collect(stmt.body, start, end, True, classes, methods)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(stmt, field, None)
                if inner and isinstance(inner, list):
                    blocks = [h.body for h in inner] if field == "handlers" else [inner]
                    for block in blocks:
                        _collect(block, start, end, in_class, classes, out)


def _has_defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a regular or keyword-only parameter has a default (what callback uses read)."""
    args = fn.args
    return bool(args.args and args.defaults) or any(d is not None for d in args.kw_defaults)


def _kept_by_name(fn: _Function, conv: Conventions) -> bool:
    name = fn.node.name
    if not fn.in_class:
        return False
    return (
        name == "__init__" or name in conv.setters or name in conv.default_getters
        or (name.startswith("forward") and _has_defaults(fn.node)) or _checks_or_builds(fn.node)
    )


def _checks_or_builds(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A method whose own statements raise under a test (a collector's count check) or return a
    newly built class (a factory a subclass may override): both are facts (RaiseCheck, factories)."""
    for stmt in node.body:
        if stmt.__class__ is ast.If and any(b.__class__ is ast.Raise for b in stmt.body):  # type: ignore[attr-defined]
            return True
        if stmt.__class__ is ast.Return and isinstance(stmt.value, ast.Call):  # type: ignore[attr-defined]
            func = stmt.value.func  # type: ignore[attr-defined]
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name[:1].isupper():
                return True
    return False


def _factory(fn: _Function, lines: _Lines) -> bool:
    """Whether a method returns a call of a capitalised name (anywhere inside it: a superset)."""
    if not fn.in_class or not _MAYBE_FACTORY.search(lines.text(fn.first, fn.last)):
        return False
    for node in ast.walk(fn.node):
        if node.__class__ is ast.Return and node.value.__class__ is ast.Call:  # type: ignore[attr-defined]
            func = node.value.func  # type: ignore[attr-defined]
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name[:1].isupper():
                return True
    return False


def _dull(functions: list[_Function], lines: _Lines, conv: Conventions) -> list[_Function]:
    """The functions of one scope (a class's methods, or the module's functions) whose bodies
    can yield no fact, after keeping what ``__init__`` calls as ``self.<name>`` (transitively:
    the class an attribute is built from may come from a helper's ``return``)."""
    kept = [f for f in functions if _kept_by_name(f, conv) or lines.mentions(f.first, f.last) or _factory(f, lines)]
    rest = [f for f in functions if f not in kept]
    frontier = [f for f in kept if f.node.name == "__init__"]
    named: set[bytes] = set()
    while frontier and rest:
        for f in frontier:
            named.update(_SELF_NAME.findall(lines.text(f.first, f.last)))
        frontier = [f for f in rest if f.node.name.encode() in named]
        rest = [f for f in rest if f not in frontier]
    return rest


def _stub(fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: _Lines, imports: list[ast.stmt]) -> dict[int, bytes] | None:
    """Replacement lines for ``fn``'s body: its imports on their own lines, string literals
    over the rest; None when the body cannot be cut out cleanly."""
    first, last = fn.body[0].lineno, fn.end_lineno or fn.body[-1].end_lineno or 0
    if last - first + 1 < _STUB_MIN_LINES:
        return None
    head = lines.lines[first - 1]
    indent = head[: fn.body[0].col_offset]
    if indent.strip(b" \t\f") or not indent:
        return None  # the body starts on the header's line
    inner = [i for i in imports if first <= i.lineno and (i.end_lineno or i.lineno) <= last]
    out: dict[int, bytes] = {}
    taken: set[int] = set()
    for imp in inner:
        top, bottom = imp.lineno, imp.end_lineno or imp.lineno
        if any(n in taken for n in range(top, bottom + 1)):
            return None  # two imports on one line: not worth the care
        taken.update(range(top, bottom + 1))
        head_line, tail_line = lines.lines[top - 1], lines.lines[bottom - 1]
        if top == bottom:
            out[top] = indent + head_line[imp.col_offset : imp.end_col_offset] + _ending(head_line)
            continue
        out[top] = indent + head_line[imp.col_offset :]
        for n in range(top + 1, bottom):
            out[n] = lines.lines[n - 1]
        out[bottom] = tail_line[: imp.end_col_offset] + _ending(tail_line)
    n = first
    while n <= last:
        if n in taken:
            n += 1
            continue
        gap_end = n
        while gap_end + 1 <= last and gap_end + 1 not in taken:
            gap_end += 1
        if gap_end == n:
            out[n] = indent + b"..." + _ending(lines.lines[n - 1])
        else:
            out[n] = indent + b'"""' + _ending(lines.lines[n - 1])
            for m in range(n + 1, gap_end):
                out[m] = _ending(lines.lines[m - 1]) or b"\n"
            out[gap_end] = b'"""' + _ending(lines.lines[gap_end - 1])
        n = gap_end + 1
    return out


def _ending(line: bytes) -> bytes:
    if line.endswith(b"\r\n"):
        return b"\r\n"
    if line.endswith((b"\n", b"\r")):
        return line[-1:]
    return b""


def select(data: bytes, tree: ast.Module, imports: list[ast.stmt], conv: Conventions) -> bytes | None:
    """The source to give libcst (same lines, dull bodies stubbed), or None to give it ``data``.

    Files where a line or a column could mean something else to the stdlib parser than to a
    byte slice are left whole: a lone carriage return (a line break to one reader, maybe not
    to another) and anything that is not UTF-8 (``ast`` columns count UTF-8 bytes)."""
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = _Lines(data, body_patterns(conv))
    functions: list[_Function] = []
    classes: list[list[_Function]] = []
    _collect(tree.body, 1, len(lines.lines), False, classes, functions)
    replaced: dict[int, bytes] = {}
    imports = sorted(imports, key=lambda i: i.lineno)
    for scope in [functions, *classes]:
        for fn in _dull(scope, lines, conv):
            stub = _stub(fn.node, lines, imports)
            if stub is not None:
                replaced.update(stub)
    if not replaced:
        return None
    out = list(lines.lines)
    for n, text in replaced.items():
        if 0 < n <= len(out):
            out[n - 1] = text
    return b"".join(out)
