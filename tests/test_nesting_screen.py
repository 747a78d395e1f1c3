"""The pre-screen's depth walk skips what cannot be deep, and finds all that can.

``parse._screen`` refuses files nested deeper than ``MAX_NESTING`` (see its docstring). Walking
every node of every file cost a third of the screen, so ``parse._too_deep`` skips the subtree
of any node whose span is too short to hold that many levels (see its docstring for the
bound). These tests hold the pruned walk to the whole walk (``prune=False``): the same
verdict, the same line; check the bound itself on the shapes that nest fastest per byte, compound
statements included; and show that small statements, compound or not, are not walked into.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fixture_paths import FIXTURES
from flowtrace.index.parse import MAX_NESTING, SPAN_LEVELS, SPAN_SLACK, _line_ends, _screen, _too_deep

REPO = Path(__file__).resolve().parents[1]

# Expressions the stdlib parser accepts but that nest past MAX_NESTING in the walk's weighting.
DEEP_EXPRESSIONS = {
    "unary": "-" * 1500 + "1",
    "not": "not " * 1100 + "x",
    "attributes": "a" + ".b" * 1200,
    "calls": "f" + "()" * 1200,
    "ors": " or ".join(["a"] * 1500),
    "ands": " and ".join(["a"] * 1100),
}

# Places to put one: (name, template); {e} is the expression.
CONTEXTS = {
    "module": "x = {e}\n",
    "after small statements": "import os\n" + "".join(f"v{i} = {i}\n" for i in range(3000)) + "y = {e}\n",
    "method": (
        "import a\n\n\nclass C(B):\n    def f(self):\n        from b import c\n        if c:\n            return {e}\n"
    ),
    "multi-line call": "import a\nf(\n    1,\n    {e},\n    2,\n)\n",
    "decorator": "@deco({e})\ndef f():\n    import g\n",
    "class decorator": "@deco(\n    {e}\n)\nclass C:\n    pass\n",
    "default": "def f(a=(\n    {e}\n)):\n    pass\n",
    "lambda body": "g = lambda: (\n    {e}\n)\n",
    "comprehension": "xs = [\n    y for y in z if {e}\n]\n",
    "f-string": 'x = f"{{({e})}}"\n',
    "multi-line f-string": 'x = (\n    f"a"\n    f"{{({e})}}"\n)\n',
    "match": "match v:\n    case [a, b] if {e}:\n        import q\n",
    "try": "try:\n    import x\nexcept E as e:\n    y = {e}\nfinally:\n    import z\n",
    "with": "with a as b, c:\n    import d\n    y = [\n        {e}\n    ]\n",
    "latin-1 cookie": "# -*- coding: latin-1 -*-\nx = (\n    {e}\n)\n",
    "carriage returns": "x = (\r    {e}\r)\r",
}

SHALLOW = "".join(f"v{i} = f(a.b[c], -d, not e, lambda: g or h)\n" for i in range(50))


def _whole(data: bytes) -> tuple[int | None, str | None]:
    """(line, class) of the first node past the limit of the whole walk, or (None, None)."""
    deep = _too_deep(ast.parse(data), 1, None, prune=False)
    return (getattr(deep, "lineno", 0), type(deep).__name__) if deep is not None else (None, None)


def _pruned(data: bytes) -> tuple[int | None, str | None]:
    deep = _too_deep(ast.parse(data), 1, _line_ends(data))
    return (getattr(deep, "lineno", 0), type(deep).__name__) if deep is not None else (None, None)


def _encode(text: str) -> bytes:
    return text.encode("latin-1" if "latin-1" in text[:40] else "utf-8")


@pytest.mark.parametrize("context", sorted(CONTEXTS))
@pytest.mark.parametrize("shape", sorted(DEEP_EXPRESSIONS))
def test_a_deep_expression_is_caught_wherever_it_stands(shape, context):
    data = _encode(CONTEXTS[context].format(e=DEEP_EXPRESSIONS[shape]))
    whole = _whole(data)
    assert whole[0] is not None, "the corpus must really be too deep"
    assert _pruned(data) == whole
    problem, _ = _screen(data)
    assert problem == (whole[0], f"nesting too deep to parse (over {MAX_NESTING} levels)")


@pytest.mark.parametrize("context", sorted(CONTEXTS))
def test_shallow_files_pass(context):
    data = _encode(CONTEXTS[context].format(e="a or -b.c()") + SHALLOW)
    assert _pruned(data) == _whole(data)
    assert _pruned(data)[0] is None


def _repository_files() -> list[Path]:
    return sorted(p for base in (FIXTURES, REPO / "flowtrace") for p in base.rglob("*.py"))


def test_same_verdicts_on_the_repository_files():
    for path in _repository_files():
        data = path.read_bytes()
        assert _pruned(data) == _whole(data), path


def _depth_below(node: ast.AST) -> int:
    """The most weighted levels any node of ``node``'s subtree lies below ``node`` (as the walk counts)."""
    most, stack = 0, [(node, 0)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, ast.BoolOp):
            depth += len(current.values) - 1
        most = max(most, depth)
        for field, value in ast.iter_fields(current):
            children = value if isinstance(value, list) else [value]
            stack.extend((c, depth + 1) for c in children if isinstance(c, ast.AST) and field != "ctx")
    return most


CHAINS = [
    "-" * 60 + "x", "~-+" * 20 + "x", "not " * 30 + "x", "a" + ".b" * 40, "f" + "()" * 40, "a" + "[0]" * 40,
    " or ".join("a" * 40), " and ".join(["-a"] * 30), "+".join("1" * 60), "**".join("2" * 40), "lambda: " * 30 + "1",
    "[" * 30 + "]" * 30, "(" * 30 + "x," + ")," * 29 + ")", "{**{**{**{}}}}",
    "[x for x in [y for y in [z for z in w]]]", "x if y else " * 20 + "z", "(a := (b := (c := d)))",
    'f"{x:{y}}"', 'f"{x!r:>{w}}"', "f'{f\"{x}\"}'", "a[b:c:d, e:f]", "*a, *b", "{a: b for a in c if d}",
]
STATEMENTS = [
    "match v:\n    case -1 | 1.5 | -2+3j | a.b.c.d | None | [*_, {'k': (p as q)}] | C(d=e, f=[g]):\n        pass\n",
    "def f(a, /, b: int = -1, *c: str, d=lambda: 2, **e) -> x.y:\n    pass\n",
    "with a as (b, c), d:\n    pass\n",
    "for [a, *b] in c:\n    del a[0], b.c\n",
    "global g\nassert x, y\nraise E from F\nx: list[int] = []\nx += 1\n",
]
# Compound statements that nest fastest per byte: blocks one space deeper each, ``elif`` chains
# (each a nested ``If`` at the same indentation), one-line blocks, decorators (outside the ``def``
# line, inside the span the walk gives a definition), except clauses, match cases.
COMPOUND = [
    "".join(" " * i + "if a:\n" for i in range(30)) + " " * 30 + "b\n",
    "if a: b\n" + "elif a: b\n" * 30 + "else: b\n",
    "".join(" " * i + ("while a:\n" if i < 10 else "for a in b:\n") for i in range(20)) + " " * 20 + "pass\n",
    "".join(" " * i + ("def f():\n" if i < 10 else "class C:\n") for i in range(20)) + " " * 20 + "...\n",
    "".join(" " * i + ("with a:\n" if i < 10 else "try:\n") for i in range(20))
    + " " * 20 + "x\n" + "".join(" " * (19 - i) + "except:x\n" for i in range(10)),
    "try:\n x\nexcept* E:\n try:\n  y\n except* F:\n  z\nelse:\n w\nfinally:\n v\n",
    "@a\n@b.c(d)\n@e[f]\ndef g(h=-1, *, i: j = k) -> l:\n @m\n class N(O, p=q):\n  @r\n  async def s(): ...\n",
    "async def f():\n async for a in b:\n  async with c as d:\n   if e: f\n",
    "match v:\n case 1:\n  match w:\n   case [a]:\n    match x:\n     case _: y\n",
    "if a: b\nwhile a: b\nfor a in b: c\nwith a: b\nclass C: d\ndef f(): g\n",
]


def test_the_span_bound_holds_on_the_fastest_nesting_shapes():
    """The premise of the pruning: no node's subtree is deeper than its span allows."""
    sources = [f"r = {c}\n" for c in CHAINS] + [f"{c}\n" for c in CHAINS if not c.startswith("*")] + STATEMENTS
    sources.append("async def g():\n    return " + "(await " * 20 + "x" + ")" * 20 + "\n")
    sources += COMPOUND
    for source in sources:
        data = source.encode()
        ends = _line_ends(data)
        assert ends is not None
        for node in ast.walk(ast.parse(data)):
            last = getattr(node, "end_lineno", None)
            if last is None:
                continue
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            size = node.end_col_offset - node.col_offset if last == first else ends[last] - ends[first - 1]
            assert _depth_below(node) <= SPAN_LEVELS * size + SPAN_SLACK, (source, ast.dump(node)[:80])


def _lying_statement(levels: int) -> ast.stmt:
    """``x = ---...1`` ``levels`` deep, claiming the span of ``x = 1``: only a walk into the
    statement can see the depth."""
    value: ast.expr = ast.Constant(1)
    for _ in range(levels):
        value = ast.UnaryOp(ast.USub(), value)
    stmt = ast.Assign([ast.Name("x", ast.Store())], value)
    for node in ast.walk(stmt):
        node.lineno, node.col_offset, node.end_lineno, node.end_col_offset = 1, 0, 1, 5  # type: ignore[attr-defined]
    return stmt


def test_small_statements_are_not_walked_into():
    """Behaviour, not time: a statement whose span is too short to be deep is skipped whole,
    so a depth it hides (impossible in parsed code) goes unseen; one inside a span long enough
    is found."""
    many_small = ast.Module([_lying_statement(3) for _ in range(2000)] + [_lying_statement(2 * MAX_NESTING)], [])
    assert _too_deep(many_small, 1, None, prune=False) is not None
    assert _too_deep(many_small, 1, None) is None
    big = _lying_statement(2 * MAX_NESTING)
    for node in ast.walk(big):
        node.end_col_offset = MAX_NESTING  # type: ignore[attr-defined]
    assert _too_deep(ast.Module([big], []), 1, None) is not None


def _lying_block(statement: ast.stmt, first: int, last: int, decorator: int | None = None) -> ast.stmt:
    """``def f(): <statement>`` claiming lines ``first..last``, decorated on line ``decorator``."""
    decorators: list[ast.expr] = []
    if decorator is not None:
        decorators.append(
            ast.Name("d", ast.Load(), lineno=decorator, col_offset=1, end_lineno=decorator, end_col_offset=2)
        )
    block = ast.FunctionDef("f", ast.arguments([], [], None, [], [], None, []), [statement], decorators)
    block.lineno, block.col_offset, block.end_lineno, block.end_col_offset = first, 0, last, 5
    return block


def _deep_statement() -> ast.stmt:
    """A statement past the limit whose one-line span is long enough to say so."""
    statement = _lying_statement(2 * MAX_NESTING)
    for node in ast.walk(statement):
        node.end_col_offset = MAX_NESTING  # type: ignore[attr-defined]
    return statement


def test_small_blocks_are_not_walked_into():
    """A compound statement is pruned by its own span as well, a definition's from its first
    decorator: a block whose span is too short to be deep is skipped whole (a depth it hides,
    impossible in parsed code, goes unseen); one that its decorators make long enough is walked."""
    ends = [0, *range(10, 10 * 2000, 10)]  # every line 10 bytes long
    small = ast.Module([_lying_block(_deep_statement(), 100, 101)], [])
    assert _too_deep(small, 1, None, prune=False) is not None
    assert _too_deep(small, 1, ends) is None
    assert _too_deep(ast.Module([_lying_block(_deep_statement(), 100, 101, decorator=99)], []), 1, ends) is None
    decorated = ast.Module([_lying_block(_deep_statement(), 100, 101, decorator=5)], [])
    assert _too_deep(decorated, 1, ends) is not None
