"""The ast helpers give the analysers what libcst's tree gave them: call arguments in source
order with their keyword or star, parameters with defaults, and a node's text as if it stood
alone (its own grouping parentheses, block-relative indentation, decorators, the block's last
comment), which the facts show as ``captured_expression``, ``source`` and the like."""

from __future__ import annotations

import ast
import textwrap

from flowtrace.index.syntax import SourceText, all_statements, arguments, parameters, walk_statements


def _first(source: str, kind: type, index: int = 0):
    tree = ast.parse(source)
    found = [n for n in ast.walk(tree) if isinstance(n, kind)]
    return SourceText(source, tree), found[index]


def test_arguments_keep_source_order_keywords_and_stars():
    call = ast.parse("f(a, *b, k=c, **d)").body[0].value
    assert [(ast.unparse(a.value), a.keyword, a.star) for a in arguments(call)] == [
        ("a", None, ""), ("b", None, "*"), ("c", "k", ""), ("d", None, "**")
    ]
    late = ast.parse("f(k=c, *b)").body[0].value  # a star after a keyword: still in source order
    assert [a.star or a.keyword for a in arguments(late)] == ["k", "*"]


def test_parameters_pair_defaults_with_their_names():
    fn = ast.parse("def f(p, /, a, b=1, *args, c, d=2, **kw): pass").body[0]
    assert [(p.name, p.default is not None) for p in parameters(fn)] == [("a", False), ("b", True)]
    assert [p.name for p in parameters(fn, kwonly=True)] == ["a", "b", "c", "d"]
    assert [p.name for p in parameters(fn, posonly=True)] == ["p", "a", "b"]


def test_a_grouped_expression_keeps_its_parentheses_a_call_argument_does_not():
    text, node = _first("x = (\n    a\n    if c\n    else b\n)\n", ast.IfExp)
    assert text.segment(node) == "(\n    a\n    if c\n    else b\n)"
    text, node = _first("f(a + b)\n", ast.BinOp)
    assert text.segment(node) == "a + b"
    text, node = _first("return_value = not (a + b)\n", ast.BinOp)
    assert text.segment(node) == "(a + b)"


def test_later_lines_are_relative_to_the_enclosing_statement():
    source = textwrap.dedent(
        """\
        class A:
            def f(self):
                self.g(
                    [
                        2,
                        3,
                    ]
                )
        """
    )
    text, node = _first(source, ast.List)
    assert text.segment(node) == "[\n        2,\n        3,\n    ]"


def test_a_definition_has_its_decorators_its_last_comment_and_its_docstring_as_written():
    source = textwrap.dedent(
        '''\
        class A:
            @property
            def f(self):
                """Doc
                   indented."""
                return 1  # why
        '''
    )
    text, node = _first(source, ast.FunctionDef)
    # the string's second line is kept as written (11 spaces), the code lines lose the def's 4
    assert text.segment(node) == '@property\ndef f(self):\n    """Doc\n           indented."""\n    return 1  # why'


def test_non_ascii_columns_are_characters():
    text, node = _first("s = 'é' + cat(x)\n", ast.Call)
    assert text.segment(node) == "cat(x)"
    assert text.character_column(node) == 10


def test_statements_in_order_without_nested_definitions():
    fn = ast.parse("def f():\n    a = 1\n    if a:\n        b = 2\n    def g():\n        c = 3\n    return b\n").body[0]
    assert [ast.unparse(s).split("\n")[0] for s in walk_statements(fn.body)] == ["a = 1", "if a:", "b = 2", "return b"]


def test_a_multi_line_expression_loses_its_innermost_statements_indentation():
    """``segment`` cuts a multi-line expression's later lines by the indentation of the innermost
    statement holding its first line: the statement starting last among those holding the line
    (nested definitions', clauses' and cases' statements included), found for every line of
    these sources as its definition says."""
    sources = [
        "x = 1; y = (\n    2)\nz = (\n  3); w = [\n 4]\n",
        "class C:\n    @d(\n        1)\n    def f(self):\n        if a:\n            b = f(\n                c,\n"
        "            )\n        else:\n            try:\n                g(\n                  h)\n"
        "            except E:\n                pass\n        return (\n            i)\n",
        "match v:\n    case 1:\n        a = [\n            1]\n    case _:\n        while b:\n"
        "            c = {\n                2}\n",
        "def f(): return (\n    1)\n\n\nasync def g():\n    async with a:\n        async for b in c:\n"
        "            d = (\n              e)\n",
    ]
    for source in sources:
        tree = ast.parse(source)
        text = SourceText(source, tree)
        statements = all_statements(tree.body)
        for line in range(len(text.lines) + 2):
            holders = [s.lineno for s in statements if s.lineno <= line <= (s.end_lineno or s.lineno)]
            own = text.line_text(line)
            expected = text.line_text(max(holders)) if holders else own
            indent = expected[: len(expected) - len(expected.lstrip(" \t"))]
            assert text._block_indent(line, own) == indent, (source, line)
    text, call = _first(sources[1], ast.Call, 1)  # f(c,) under the if (d(1) is the first call)
    assert text.segment(call) == "f(\n    c,\n)"
