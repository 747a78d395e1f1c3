"""Tests for the safe evaluator of layer-id expressions (flowtrace.model.safe_eval) and the
interpreter of setters (flowtrace.analysis.function_interpreter).

Python's own ``eval``/``exec`` appear here only as the oracle the interpreter is checked
against, with a builtins table restricted to the supported subset.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import os
import subprocess
import pickle
import re
import warnings
from pathlib import Path
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from flowtrace.analysis import function_interpreter
from flowtrace.analysis.function_interpreter import BranchStep, CallSite, FunctionRun, Write, run_function
from flowtrace.model import safe_eval
from flowtrace.model.safe_eval import CannotEvaluate, LayerStack, evaluate, normalise, normalise_names

SAFE_BUILTINS: dict[str, Any] = {
    name: getattr(builtins, name)
    for name in (
        "len",
        "list",
        "tuple",
        "sorted",
        "set",
        "range",
        "min",
        "max",
        "sum",
        "abs",
        "int",
        "reversed",
        "enumerate",
    )
}

# -- evaluate: the subset ---------------------------------------------------------------

NAMES: dict[str, object] = {
    "a": 3,
    "b": -2,
    "x": 1,
    "y": 4,
    "n": None,
    "t": True,
    "L": [3, 1, 2],
    "M": [0, -1],
    "E": [],
    "T": (2, 5),
    "S": {1, 4},
    "s": "ab",
    "self.config.num_hidden_layers": 61,
    "self.layers": LayerStack(61),
    "len(self.model.layers)": 32,
    "hasattr(self.language_model, 'set_eagle3_layers_to_capture')": True,
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1", 1),
        ("True", True),
        ("None", None),
        ("'abc'", "abc"),
        ("[1, 2]", [1, 2]),
        ("(1, 2)", (1, 2)),
        ("()", ()),
        ("{1, 2, 2}", {1, 2}),
        ("-a", -3),
        ("+t", 1),
        ("not L", False),
        ("not E", True),
        ("a + b", 1),
        ("a - b", 5),
        ("a * b", -6),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("-7 % 3", 2),
        ("L + M", [3, 1, 2, 0, -1]),
        ("T + (1,)", (2, 5, 1)),
        ("s + 'c'", "abc"),
        ("a == 3", True),
        ("a != 3", False),
        ("1 < a <= 3", True),
        ("1 < a < 2", False),
        ("a > b >= -2", True),
        ("2 in L", True),
        ("2 not in S", True),
        ("'a' in s", True),
        ("n is None", True),
        ("L is not None", True),
        ("t is True", True),
        ("E and 1", []),
        ("L and 7", 7),
        ("E or M", [0, -1]),
        ("0 or None or 5", 5),
        ("1 if t else 2", 1),
        ("1 if E else 2", 2),
        ("L[0]", 3),
        ("L[-1]", 2),
        ("L[1:]", [1, 2]),
        ("L[::-1]", [2, 1, 3]),
        ("T[:1]", (2,)),
        ("s[1]", "b"),
        ("[v + 1 for v in L]", [4, 2, 3]),
        ("[v for v in L if v > 1]", [3, 2]),
        ("[(v, w) for v in M for w in T if w > v]", [(0, 2), (0, 5), (-1, 2), (-1, 5)]),
        ("{v % 2 for v in L}", {0, 1}),
        ("sum(v * 2 for v in L)", 12),
        ("[[w for w in range(v)] for v in range(3)]", [[], [0], [0, 1]]),
        ("len(L)", 3),
        ("len(self.layers)", 61),
        ("len(self.model.layers) // 2", 16),
        ("list(T)", [2, 5]),
        ("list()", []),
        ("tuple(L)", (3, 1, 2)),
        ("tuple(sorted(set(L + [1, 3])))", (1, 2, 3)),
        ("sorted(L, reverse=True)", [3, 2, 1]),
        ("set(M)", {0, -1}),
        ("range(3)", range(3)),
        ("list(range(1, 10, 4))", [1, 5, 9]),
        ("min(L)", 1),
        ("max(3, 9, 2)", 9),
        ("sum(L)", 6),
        ("sum(L, 10)", 16),
        ("abs(b)", 2),
        ("int(t)", 1),
        ("int('12')", 12),
        ("int('ff', 16)", 255),
        ("list(reversed(L))", [2, 1, 3]),
        ("list(enumerate(T, 1))", [(1, 2), (2, 5)]),
        ("[i for i, v in enumerate(L) if v > 1]", [0, 2]),
        ("(2, self.config.num_hidden_layers // 2, self.config.num_hidden_layers - 3)", (2, 30, 58)),
        ("hasattr(self.language_model, 'set_eagle3_layers_to_capture')", True),
        ('hasattr(self.language_model, "set_eagle3_layers_to_capture")', True),  # normalised by parsing
        ("  a  ", 3),  # surrounding whitespace is ignored, as eval() does
    ],
)
def test_evaluate_subset(expression: str, expected: object) -> None:
    result = evaluate(expression, NAMES)
    assert same(result, expected), (result, expected)


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("undefined", "undefined"),
        ("self.model.layers_to_capture", "self.model.layers_to_capture"),
        ("L.__class__", "L.__class__"),
        ("().__class__.__bases__[0].__subclasses__()", "__subclasses__"),
        ("__import__('os').system('true')", "__import__"),
        ("open('/etc/passwd')", "open("),
        ("getattr(L, 'append')", "getattr"),
        ("(lambda: 1)()", "lambda"),
        ("(z := 1)", "z := 1"),
        ("f'{a}'", "f'{a}'"),
        ("[*L]", "*L"),
        ("{'k': 1}", "{'k': 1}"),
        ("{v: v for v in L}", "{v: v for v in L}"),
        ("1.5", "float constant"),
        ("b'x'", "bytes constant"),
        ("...", "ellipsis constant"),
        ("2 ** 10", "2 ** 10"),
        ("7 / 2", "a quotient, not an integer"),
        ("a << 1", "a << 1"),
        ("~a", "~a"),
        ("L * 2", "unsupported list * int"),
        ("L + T", "unsupported list + tuple"),
        ("S - S", "unsupported"),
        ("1 // 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("L[3]", "index out of range"),
        ("L['a']", "index of type str"),
        ("L[::0]", "slice step is zero"),
        ("S[0]", "subscript of set"),
        ("self.layers[0]", "subscript of LayerStack"),
        ("a is 3", "'is' only with None"),
        ("L < 3", "not supported"),
        ("3 in a", "not iterable"),
        ("{[1]}", "unhashable"),
        ("len(a)", "len of int"),
        ("len(reversed(L))", "len of iterator"),
        ("not self.layers", "truth value of a layer stack"),
        ("self.layers == self.layers", "comparison with a layer stack"),
        ("[v for v in self.layers]", "LayerStack is not iterable"),
        ("min(E)", "empty sequence"),
        ("min([1, 'a'])", "not supported"),
        ("sorted(L, key=None)", "unsupported arguments"),
        ("sum(['a'])", "expects ints"),
        ("abs('a')", "expects ints"),
        ("int('x1')", "invalid literal"),
        ("range(0, 5, 0)", "step is zero"),
        ("len(*L)", "unpacked arguments"),
        ("print(a)", "print(a)"),
        ("(v for v in L)", "iterator value"),
        ("[reversed(L)]", "iterator value"),
        ("[v for async_v in L]", "v"),
        ("1 +", "invalid syntax"),
        ("", "invalid syntax"),
        ("a = 1", "invalid syntax"),
        ("\x00", "invalid syntax"),
        ("a if n else", "invalid syntax"),
    ],
)
def test_evaluate_refuses(expression: str, fragment: str) -> None:
    with pytest.raises(CannotEvaluate) as info:
        evaluate(expression, NAMES)
    assert str(info.value) == f"cannot evaluate: {info.value.construct}"
    assert fragment in info.value.construct


def test_rebound_builtin_is_refused() -> None:
    with pytest.raises(CannotEvaluate, match="len is rebound"):
        evaluate("len(L)", {"len": 5, "L": [1]})


def test_locals_beat_names_inside_comprehensions() -> None:
    # A caller binding for "v + 1" describes the caller's world, not the loop variable.
    assert evaluate("[v + 1 for v in L]", {"L": [1, 2], "v + 1": 100, "v": 7}) == [2, 3]
    assert evaluate("v + 1", {"v + 1": 100}) == 100


def test_names_values_must_be_plain_data() -> None:
    with pytest.raises(CannotEvaluate, match="unsupported type object"):
        evaluate("thing", {"thing": object()})
    with pytest.raises(CannotEvaluate, match="unsupported type float"):
        evaluate("ratio > 0", {"ratio": 0.5})
    with pytest.raises(CannotEvaluate, match="too large"):
        evaluate("big", {"big": 10**13})
    nested: list[object] = []
    nested.append(nested)
    with pytest.raises(CannotEvaluate, match="nested too deeply"):
        evaluate("len(cycle)", {"cycle": nested})
    # Unused bindings are never inspected.
    assert evaluate("1", {"thing": object()}) == 1


def test_layer_stack_only_supports_len() -> None:
    assert evaluate("len(layers)", {"layers": LayerStack(4)}) == 4
    assert evaluate("layers", {"layers": LayerStack(4)}) == LayerStack(4)
    assert evaluate("layers is None", {"layers": LayerStack(4)}) is False
    with pytest.raises(ValueError):
        LayerStack(-1)


@pytest.mark.parametrize(
    "expression",
    [
        "range(1000000)",
        "list(range(200000))",
        "1000000 * 1000000 * 2",
        "[v for v in range(100000)] + [1]",
        "[v for v in range(1000) for w in range(1000)]",
        "'ab' + big",
        "sum(range(99999)) * 100000000",
    ],
)
def test_resource_caps(expression: str) -> None:
    with pytest.raises(CannotEvaluate, match="too large"):
        evaluate(expression, {"big": "x" * 99_999})


def test_work_cap() -> None:
    with pytest.raises(CannotEvaluate, match="too much work"):
        evaluate("[1 for v in range(100000) for w in range(100000) if 0]", {})


@pytest.mark.parametrize(
    "expression",
    [
        "-" * 100_000 + "1",
        "(" * 300 + "1" + ")" * 300,
        "not " * 5_000 + "a",
        "1" + " + 1" * 5_000,
        "-" * 150 + "1",
        "[" * 99 + "]" * 99,
        "a if t else " * 200 + "a",
        "x" * (safe_eval.MAX_SOURCE + 1),
    ],
)
def test_deep_or_huge_input_is_refused_not_crashed(expression: str) -> None:
    with pytest.raises(CannotEvaluate):
        evaluate(expression, NAMES)


def test_moderately_nested_input_still_works() -> None:
    assert evaluate("-" * 40 + "1", {}) == 1
    assert evaluate("(" * 40 + "a" + ")" * 40, NAMES) == 3


def test_normalise() -> None:
    assert normalise('hasattr(self.lm,  "f")') == "hasattr(self.lm, 'f')"
    assert normalise("len( self.layers )") == "len(self.layers)"
    assert normalise_names({'hasattr(m, "f")': True}) == {"hasattr(m, 'f')": True}
    with pytest.raises(CannotEvaluate):
        normalise("1 +")


def test_cannot_evaluate_message_and_pickling() -> None:
    exc = CannotEvaluate("x + 1")
    assert str(exc) == "cannot evaluate: x + 1"
    assert exc.construct == "x + 1"
    again = pickle.loads(pickle.dumps(exc))
    assert str(again) == str(exc) and again.construct == exc.construct


def test_non_string_input() -> None:
    with pytest.raises(CannotEvaluate):
        evaluate(42, {})  # type: ignore[arg-type]
    with pytest.raises(CannotEvaluate):
        run_function(None, {}, {})  # type: ignore[arg-type]


# -- run_function: the setters from real engines ----------------------------------------

SGLANG_SETTER = '''
    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
        if not self.pp_group.is_last_rank:
            return

        if layer_ids is None:
            self.capture_aux_hidden_states = True
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.capture_aux_hidden_states = True
            # we plus 1 here because in sglang, for the ith layer, it takes the output
            # of the (i-1)th layer as aux hidden state
            if layer_ids and layer_ids[0] == 1:
                self.model.layers_to_capture = [val + 1 for val in layer_ids]
            else:
                self.model.layers_to_capture = list(layer_ids)
'''

SGLANG_NAMES = {"self.pp_group.is_last_rank": True, "self.config.num_hidden_layers": 61}


def capture(run: FunctionRun) -> object:
    values = [w.value for w in run.writes if w.target == "self.model.layers_to_capture"]
    assert len(values) <= 1
    return values[0] if values else None


def test_sglang_default_branch() -> None:
    run = run_function(SGLANG_SETTER, {}, SGLANG_NAMES)
    assert capture(run) == [2, 30, 58]
    assert run.writes[0] == Write("self.capture_aux_hidden_states", True, "True", 7)
    assert run.writes[1] == Write(
        "self.model.layers_to_capture", [2, 30, 58], "[2, num_layers // 2, num_layers - 3]", 9
    )
    assert [(s.line, s.condition, s.taken) for s in run.steps] == [
        (3, "not self.pp_group.is_last_rank", False),
        (6, "layer_ids is None", True),
    ]
    assert run.steps[1].reason == "layer_ids is None is True"
    assert run.unevaluated == () and run.stopped_at is None
    assert run.returned is None and not run.returned_early and run.raised is None


def test_sglang_plus_one_branch() -> None:
    run = run_function(SGLANG_SETTER, {"layer_ids": [1, 29, 57]}, SGLANG_NAMES)
    assert capture(run) == [2, 30, 58]
    last = run.steps[-1]
    assert last == BranchStep(14, "layer_ids and layer_ids[0] == 1", True, "layer_ids[0] == 1 is True")
    assert run.steps[1].reason == "layer_ids is None is False (layer_ids = [1, 29, 57])"


def test_sglang_identity_branch() -> None:
    run = run_function(SGLANG_SETTER, {"layer_ids": [-1, 2, 30]}, SGLANG_NAMES)
    assert capture(run) == [-1, 2, 30]
    assert run.steps[-1].taken is False
    assert run.steps[-1].reason == "layer_ids[0] == 1 is False (layer_ids[0] = -1)"
    assert run.writes[-1].expression == "list(layer_ids)"


def test_sglang_empty_ids_short_circuits() -> None:
    run = run_function(SGLANG_SETTER, {"layer_ids": []}, SGLANG_NAMES)
    assert capture(run) == []
    assert run.steps[-1].reason == "layer_ids is falsy (layer_ids = [])"


def test_sglang_pp_guard_returns_early() -> None:
    run = run_function(SGLANG_SETTER, {"layer_ids": [1, 2]}, {**SGLANG_NAMES, "self.pp_group.is_last_rank": False})
    assert run.writes == () and run.calls == ()
    assert run.returned_early is True and run.returned is None
    assert run.steps == (
        BranchStep(3, "not self.pp_group.is_last_rank", True,
                   "self.pp_group.is_last_rank is False"),
    )


def test_sglang_unknown_guard_stops_without_guessing() -> None:
    run = run_function(SGLANG_SETTER, {}, {"self.config.num_hidden_layers": 61})
    assert run.writes == () and run.steps == ()
    assert run.unevaluated == ("cannot evaluate: self.pp_group.is_last_rank",)
    assert run.stopped_at == 3


def test_sglang_unknown_layer_count_still_records_the_write() -> None:
    run = run_function(SGLANG_SETTER, {}, {"self.pp_group.is_last_rank": True})
    assert run.writes[-1] == Write(
        "self.model.layers_to_capture", None, "[2, num_layers // 2, num_layers - 3]", 9
    )
    assert run.unevaluated == (
        "cannot evaluate: self.config.num_hidden_layers",
        "cannot evaluate: num_layers (unbound local)",
    )


VLLM_SETTER = """
def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
    self.model.aux_hidden_state_layers = tuple(sorted(set(layers)))
"""

VLLM_DEFAULTS = """
def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
    num_layers = len(self.model.layers)
    return (2, num_layers // 2, num_layers - 3)
"""


def test_vllm_setter_and_defaults() -> None:
    run = run_function(VLLM_SETTER, {"layers": (30, 2, 58, 2)}, {})
    assert run.writes == (
        Write("self.model.aux_hidden_state_layers", (2, 30, 58), "tuple(sorted(set(layers)))", 3),
    )
    for names in ({"self.model.layers": LayerStack(61)}, {"len(self.model.layers)": 61}):
        run = run_function(VLLM_DEFAULTS, {}, names)
        assert run.returned == (2, 30, 58)
        assert run.returned_early is False


DELEGATING_SETTER = """
def set_eagle3_layers_to_capture(self, layer_ids: Optional[list[int]] = None) -> None:
    if hasattr(self.language_model, "set_eagle3_layers_to_capture"):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)
    else:
        raise NotImplementedError("no capture support")
"""


def test_delegation_gives_a_call_site() -> None:
    key = normalise('hasattr(self.language_model, "set_eagle3_layers_to_capture")')
    run = run_function(DELEGATING_SETTER, {"layer_ids": [1, 2]}, {key: True})
    assert run.calls == (
        CallSite("self.language_model.set_eagle3_layers_to_capture", ([1, 2],), (), ("layer_ids",), 4),
    )
    assert run.steps[0].taken is True
    run = run_function(DELEGATING_SETTER, {"layer_ids": [1, 2]}, {key: False})
    assert run.calls == () and run.raised == "NotImplementedError('no capture support')"


def test_delegation_with_transformed_ids_and_keywords() -> None:
    source = """
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.set_eagle3_layers_to_capture([val + 1 for val in layer_ids], strict=True, **extra)
    """
    run = run_function(source, {"layer_ids": [1, 29]}, {})
    (call,) = run.calls
    assert call.callee == "self.model.set_eagle3_layers_to_capture"
    assert call.arguments == ([2, 30],)
    assert call.keywords == (("strict", True), ("**", None))
    assert call.argument_sources == ("[val + 1 for val in layer_ids]", "strict=True", "**extra")
    assert run.unevaluated == ("cannot evaluate: **extra",)


def test_call_argument_that_cannot_be_evaluated_is_none() -> None:
    run = run_function("def f(self):\n    self.g(self.ids, *rest)\n", {}, {})
    assert run.calls[0].arguments == (None, None)
    assert run.unevaluated == ("cannot evaluate: self.ids", "cannot evaluate: *rest")


# -- run_function: statements -----------------------------------------------------------


def run(body: str, arguments: dict[str, object] | None = None, names: dict[str, object] | None = None,
        params: str = "self, ids=None") -> FunctionRun:
    lines = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return run_function(f"def f({params}):\n{lines}\n", arguments or {}, names or {})


def test_assignments_and_writes() -> None:
    result = run("""
n: int = 4
n += 2
k = m = n * 2
a, (b, c) = 1, [2, 3]
self.out = [k, m, a, b, c]
self.grid[0] = n
self.count += 1
""", names={"self.count": 9})
    assert [(w.target, w.value, w.expression) for w in result.writes] == [
        ("self.out", [12, 12, 1, 2, 3], "[k, m, a, b, c]"),
        ("self.grid[0]", 6, "n"),
        ("self.count", 10, "self.count + 1"),
    ]
    assert result.unevaluated == ()


def test_failed_local_assignment_unbinds() -> None:
    result = run("""
n = 3
n = self.unknown
self.out = n + 1
""")
    assert result.writes == (Write("self.out", None, "n + 1", 4),)
    assert result.unevaluated == ("cannot evaluate: self.unknown", "cannot evaluate: n (unbound local)")


def test_bad_unpacking_is_recorded() -> None:
    result = run("a, b = [1, 2, 3]\nself.x = a")
    assert result.writes == (Write("self.x", None, "a", 3),)
    assert "cannot unpack" in result.unevaluated[0]


def test_elif_chain_and_returns() -> None:
    body = """
if ids is None:
    return 'none'
elif len(ids) > 2:
    return 'long'
elif ids:
    pass
else:
    return 'empty'
return 'short'
"""
    assert run(body).returned == "none"
    assert run(body).returned_early is True
    assert run(body, {"ids": [1, 2, 3]}).returned == "long"
    short = run(body, {"ids": [1]})
    assert short.returned == "short" and short.returned_early is False
    assert [s.condition for s in short.steps] == ["ids is None", "len(ids) > 2", "ids"]
    assert short.steps[1].reason == "len(ids) > 2 is False (len(ids) = 1)"
    assert short.steps[2].reason == "ids is truthy (ids = [1])"
    assert run(body, {"ids": []}).returned == "empty"


def test_return_in_last_statement_is_not_early() -> None:
    result = run("x = 1\nif ids:\n    return 1\nelse:\n    return 2", {"ids": [1]})
    assert result.returned == 1 and result.returned_early is False


def test_ternary_statements_record_steps() -> None:
    result = run("self.x = 1 if ids else 2\nself.f() if ids is None else self.g(ids)", {"ids": [5]})
    assert result.writes[0].value == 1
    assert [(s.line, s.condition, s.taken) for s in result.steps] == [(2, "ids", True), (3, "ids is None", False)]
    assert [c.callee for c in result.calls] == ["self.g"]


def test_ternary_inside_comprehension_is_not_a_step() -> None:
    result = run("self.x = [1 if v else 0 for v in ids]", {"ids": [0, 1]})
    assert result.writes[0].value == [0, 1] and result.steps == ()


def test_raise_and_assert() -> None:
    assert run("raise ValueError(ids)").raised == "ValueError(ids)"
    assert run("raise").raised == "raise"
    failed = run("assert ids, 'need ids'\nself.x = 1", {"ids": []})
    assert failed.raised == "AssertionError('need ids')" and failed.writes == ()
    passed = run("assert ids\nassert self.unknown\nself.x = 1", {"ids": [1]})
    assert passed.raised is None and len(passed.writes) == 1
    assert passed.unevaluated == ("cannot evaluate: self.unknown",)


def test_docstring_pass_global_are_ignored() -> None:
    result = run('"""Docstring."""\nglobal G\npass\nself.x = 1\n...\nids')
    assert result.unevaluated == () and len(result.writes) == 1


@pytest.mark.parametrize(
    ("statement", "kind"),
    [
        ("for v in self.unknown:\n    self.x = v", "for"),
        ("while False:\n    pass", "while"),
        ("with ctx:\n    self.x = 1", "with"),
        ("try:\n    self.x = 1\nexcept Exception:\n    pass", "try"),
        ("def helper():\n    return 1", "def"),
        ("class Local:\n    pass", "class"),
        ("import os", "import"),
        ("match ids:\n    case _:\n        pass", "match"),
    ],
)
def test_unsupported_statements_are_skipped(statement: str, kind: str) -> None:
    result = run(f"{statement}\nself.after = 1")
    assert result.unevaluated == (f"cannot evaluate: {kind} statement",)
    assert result.writes[-1].target == "self.after"
    assert result.stopped_at is None


def test_skipped_statement_unbinds_what_it_assigns() -> None:
    result = run("v = 1\nfor v in self.unknown:\n    pass\nself.x = v", {"ids": [7]})
    assert result.writes == (Write("self.x", None, "v", 5),)
    assert result.unevaluated[-1] == "cannot evaluate: v (unbound local)"


def test_skipped_statement_that_may_return_stops() -> None:
    result = run("for v in self.unknown:\n    return v\nself.x = 1", {"ids": [7]})
    assert result.writes == () and result.stopped_at == 2


def test_in_place_changes_of_local_lists_stop() -> None:
    for body in ("w = [1]\nv = w\nw.append(2)\nself.x = v",
                 "w = [1]\nw += [2]\nself.x = w",
                 "w = [1]\nw[0] = 2\nself.x = w",
                 "w = [[1]]\nw[0].append(2)\nself.x = w",
                 "w = [1]\nv = w.pop()\nself.x = w",
                 "w = [1]\nfor v in self.unknown:\n    w.append(v)\nself.x = w",
                 "w = {1}\ndel w[0]\nself.x = w"):
        result = run(body)
        assert result.writes == () and result.stopped_at is not None, body
        assert "in-place change of local w" in result.unevaluated[-1]
    # Methods that only read, and calls on values the caller owns, are fine.
    kept = run("w = [1, 1]\nself.g(w.count(1))\nself.model.setter(w)\nself.x = w")
    assert kept.stopped_at is None and kept.writes[0].value == [1, 1]
    assert kept.calls[0] == CallSite("self.g", (None,), (), ("w.count(1)",), 3)
    # Immutable values are safe to rebind.
    assert run("v = (1,)\nv += (2,)\nself.x = v").writes[0].value == (1, 2)


def test_expression_statement_with_nested_call_is_recorded() -> None:
    result = run("ids and self.f(ids)", {"ids": [1]})
    assert result.calls == () and result.unevaluated == ("cannot evaluate: ids and self.f(ids)",)


def test_parameters_defaults_and_unknown_arguments() -> None:
    result = run("self.x = (a, b, c, d)", {"a": 1, "zz": 3}, {"K": 9},
                 params="self, a, b=K + 1, *, c=[2], d=undefined")
    assert result.writes[0].value is None  # d is unbound
    assert "cannot evaluate: undefined" in result.unevaluated
    assert "cannot evaluate: argument zz (no such parameter)" in result.unevaluated
    result = run("return (a, b, c)", {"a": 1}, {"K": 9}, params="a, b=K + 1, *, c=[2]")
    assert result.returned == (1, 10, [2])
    bad = run("return a", {"a": object()}, params="a")
    assert bad.returned is None and "unsupported type object" in bad.unevaluated[0]


def test_unbound_parameter_may_be_described_by_names() -> None:
    assert run("return len(self.layers)", names={"self.layers": LayerStack(5)}).returned == 5
    assert run("return ids", names={"ids": [4]}, params="self, ids").returned == [4]


def test_local_assigned_later_does_not_fall_back_to_names() -> None:
    result = run("self.x = n\nn = 2", names={"n": 1})
    assert result.writes[0].value is None


def test_line_numbers_are_relative_to_the_given_source() -> None:
    source = "\n\n        @decorator\n        def f(self):\n            self.x = 1\n"
    assert run_function(source, {}, {}).writes[0].line == 5


@pytest.mark.parametrize("source", ["", "x = 1", "def f(:\n pass", "def f(): pass\ndef g(): pass", "class C:\n  pass"])
def test_run_function_refuses_non_functions(source: str) -> None:
    with pytest.raises(CannotEvaluate):
        run_function(source, {}, {})


def test_async_function_is_interpreted_up_to_await() -> None:
    result = run_function("async def f(self):\n    self.x = 1\n    await self.y()\n", {}, {})
    assert len(result.writes) == 1 and result.unevaluated == ("cannot evaluate: await self.y()",)


def test_deeply_nested_function_is_refused() -> None:
    source = "def f(x):\n" + "".join("    " * (i + 1) + "if x:\n" for i in range(120)) + "    " * 121 + "pass\n"
    with pytest.raises(CannotEvaluate):
        run_function(source, {"x": 1}, {})


@pytest.mark.parametrize("module", [safe_eval, function_interpreter])
def test_module_never_evals_execs_or_compiles(module: object) -> None:
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not called & {"eval", "exec", "compile", "__import__", "open"}


# -- property tests ---------------------------------------------------------------------


def same(left: object, right: object) -> bool:
    """Equality that also checks types (so True is not 1 and (1,) is not [1])."""
    if type(left) is not type(right):
        return False
    if isinstance(left, (list, tuple)):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right))  # type: ignore[arg-type]
    return left == right


def oracle(expression: str, names: dict[str, object]) -> tuple[bool, object]:
    """Python's answer, with only the subset's builtins; names as globals so comprehensions see them."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = compile(expression, "<oracle>", "eval")
            return True, eval(code, {"__builtins__": SAFE_BUILTINS, **names})  # noqa: S307 - test oracle
    except Exception as exc:  # every Python failure counts
        return False, exc


KINDS = ("int", "bool", "list", "tuple", "set", "str")
LEAVES: dict[str, list[str]] = {
    "int": ["a", "b", "x", "y", "len(L)", "0", "1", "2", "(-3)", "5"],
    "bool": ["True", "False", "t", "(n is None)", "(a is not None)"],
    "list": ["L", "M", "E", "[]", "[2, 0]"],
    "tuple": ["T", "()", "(1,)"],
    "set": ["S", "set()", "{3}"],
    "str": ["s", "'xy'", "''"],
}
PRODUCTIONS: dict[str, list[str]] = {
    "int": [
        "({int} + {int})", "({int} - {int})", "({int} * {int})", "({int} // {int})", "({int} % {int})",
        "(-{int})", "(+{int})", "len({list})", "len({tuple})", "len({set})", "len({str})", "sum({list})",
        "sum({int} for x in {list})", "min({list})", "max({tuple})", "min({int}, {int})",
        "max({int}, {int}, {int})", "abs({int})", "int({bool})", "int({int})", "{list}[{int}]",
        "{tuple}[{int}]", "({int} if {bool} else {int})", "({int} and {int})", "({int} or {int})",
        "sum(range({leafint}))", "len(range({leafint}, {leafint}))",
    ],
    "bool": [
        "({int} == {int})", "({int} != {int})", "({int} < {int})", "({int} >= {int})", "({int} < {int} <= {int})",
        "({int} in {list})", "({int} not in {set})", "({int} in {tuple})", "({list} == {list})",
        "({tuple} < {tuple})", "({set} <= {set})", "(not {bool})", "({bool} and {bool})", "({bool} or {bool})",
        "({bool} if {bool} else {bool})", "({str} in {str})", "({str} < {str})", "({int} in range({leafint}))",
    ],
    "list": [
        "[{int}, {int}]", "({list} + {list})", "list({tuple})", "list({set})", "sorted({list})",
        "sorted({set}, reverse={bool})", "{list}[{int}:{int}]", "{list}[::{int}]", "[{int} for x in {list}]",
        "[{int} for x in {list} if {bool}]", "[{int} for x in {list} for y in {tuple}]",
        "list(reversed({list}))", "({list} if {bool} else {list})", "({list} or {list})",
        "[y for (x, y) in enumerate({list})]", "list(range({leafint}))", "list({int} for x in {set})",
    ],
    "tuple": [
        "({int}, {int})", "tuple({list})", "({tuple} + {tuple})", "{tuple}[{int}:]",
        "tuple({int} for x in {list})", "tuple(sorted({set}))", "tuple(enumerate({list}))[{int}]",
    ],
    "set": ["{{{int}, {int}}}", "set({list})", "{{{int} for x in {list} if {bool}}}", "set(range({leafint}))"],
    "str": ["({str} + {str})", "{str}[{int}:]", "({str} if {bool} else {str})", "{str}[::-1]"],
}
CHAOS: list[str] = [
    "({any} * {any})", "({any} + {any})", "({any} - {any})", "{any}[{any}]", "({any} is {any})", "len({any})",
    "{{{any}}}", "[{any}]", "({any} < {any})", "({any} in {any})", "sorted({any})", "sum({any})", "min({any})",
    "list({any})", "int({any})", "abs({any})", "range({any})", "({any} // {any})", "[x for x in {any}]",
    "(not {any})", "({any} and {any})", "reversed({any})", "{any}[{any}:{any}]", "(x for x in {any})",
    "a.b", "z", "2 ** {any}", "[*{any}]",
]


SLOT = re.compile(r"\{\{|\}\}|\{(\w+)\}")


@st.composite
def expressions(draw: st.DrawFn, kind: str, depth: int, chaos: bool = False) -> str:
    """Source text of an expression of ``kind``; with ``chaos`` sub-expressions ignore types."""
    if chaos and (kind == "any" or draw(st.integers(0, 3)) == 0):
        kind = draw(st.sampled_from(KINDS))
        if depth > 0 and draw(st.booleans()):
            return fill(draw, draw(st.sampled_from(CHAOS)), depth, chaos)
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if kind == "int" and draw(st.booleans()):
            number = draw(st.integers(-5, 5))
            return f"({number})" if number < 0 else str(number)
        return draw(st.sampled_from(LEAVES[kind]))
    return fill(draw, draw(st.sampled_from(PRODUCTIONS[kind])), depth, chaos)


def fill(draw: st.DrawFn, template: str, depth: int, chaos: bool) -> str:
    """Replace each ``{kind}`` with its own sub-expression (``{{``/``}}`` are literal braces)."""

    def one(match: re.Match[str]) -> str:
        slot = match.group(1)
        if slot is None:
            return match.group(0)[0]
        if slot == "leafint":
            return draw(st.sampled_from(LEAVES["int"]))
        return draw(expressions(slot, depth - 1, chaos))

    return SLOT.sub(one, template)


# database=None: these tests leave no .hypothesis directory behind in the shared tree.
PROPERTY = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
FUNCTION_PROPERTY = settings(PROPERTY, max_examples=120)
LIMITS = ("too large", "too much work")


@PROPERTY
@given(st.sampled_from(KINDS).flatmap(lambda kind: expressions(kind, 3)))
def test_evaluate_agrees_with_python_on_the_subset(expression: str) -> None:
    ast.parse(expression, mode="eval")  # the generator only writes valid syntax
    try:
        ours: object = evaluate(expression, NAMES)
    except CannotEvaluate as exc:
        assume(not any(limit in exc.construct for limit in LIMITS))
        ok, theirs = oracle(expression, NAMES)
        assert not ok, f"{expression!r}: Python gives {theirs!r} but we refused: {exc}"
        return
    ok, theirs = oracle(expression, NAMES)
    assert ok, f"{expression!r}: Python raised {theirs!r} but we gave {ours!r}"
    assert same(ours, theirs), (expression, ours, theirs)


@PROPERTY
@given(expressions("any", 3, chaos=True))
def test_evaluate_is_never_wrong_on_mixed_types(expression: str) -> None:
    try:
        ours: object = evaluate(expression, NAMES)
    except CannotEvaluate:
        return  # refusing is always allowed here; the typed property checks completeness
    ok, theirs = oracle(expression, NAMES)
    assert ok, f"{expression!r}: Python raised {theirs!r} but we gave {ours!r}"
    assert same(ours, theirs), (expression, ours, theirs)


class Forbidden(AssertionError):
    pass


def forbid(*_: object, **__: object) -> None:
    raise Forbidden("the evaluator tried to execute something")


def guarded_compile(source: Any, filename: Any, mode: Any, flags: int = 0, *args: Any, **kwargs: Any) -> Any:
    assert flags & ast.PyCF_ONLY_AST, "compile() used for something other than parsing"
    return REAL_COMPILE(source, filename, mode, flags, *args, **kwargs)


REAL_COMPILE = builtins.compile


REAL_IMPORT = builtins.__import__
DANGEROUS_MODULES = {"os", "sys", "subprocess", "shutil", "socket", "importlib", "ctypes", "pickle", "builtins"}


def guarded_import(name: str, *args: Any, **kwargs: Any) -> Any:
    # The stdlib itself imports lazily (ast.walk imports collections), so only
    # modules that could do harm are refused.
    if name.split(".")[0] in DANGEROUS_MODULES:
        forbid()
    return REAL_IMPORT(name, *args, **kwargs)


@contextlib.contextmanager
def nothing_runs() -> Iterator[None]:
    """Make every way of running code fail loudly; compile() may only parse."""
    with mock.patch.multiple(
        builtins, eval=forbid, exec=forbid, __import__=guarded_import, open=forbid, compile=guarded_compile,
        breakpoint=forbid, print=forbid,
    ), mock.patch.object(os, "system", forbid), mock.patch.object(subprocess, "Popen", forbid):
        yield


PYTHONISH = st.text(alphabet="()[]{}+-*/%<>=!,:.'\" \n\tabcLxyz0123456789_#@\\", max_size=60)


@settings(max_examples=300, deadline=None, database=None)
@given(st.one_of(st.text(max_size=80), PYTHONISH))
def test_arbitrary_text_only_ever_raises_cannot_evaluate(text: str) -> None:
    with nothing_runs():
        try:
            evaluate(text, NAMES)
        except CannotEvaluate:
            pass
        try:
            result = run_function(text, {"ids": [1]}, NAMES)
        except CannotEvaluate:
            pass
        else:
            assert isinstance(result, FunctionRun)


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('touch /tmp/flowtrace-pwned')",
        "open('/tmp/flowtrace-pwned', 'w')",
        "eval('1')",
        "exec('x = 1')",
        "compile('1', '', 'eval')",
        "[].__class__.__base__.__subclasses__()",
        "(1).__class__",
        "L.__len__()",
        "globals()",
        "vars()",
        "breakpoint()",
        "type(L)",
        "getattr(L, '__class__')",
        "[x for x in ().__class__.__mro__]",
        "sorted(L, key=print)",
    ],
)
def test_hostile_expressions_run_nothing(expression: str) -> None:
    with nothing_runs():
        with pytest.raises(CannotEvaluate):
            evaluate(expression, NAMES)
        result = run_function(f"def f(self):\n    self.x = {expression}\n    {expression}\n", {}, NAMES)
    assert result.writes[0].value is None and result.unevaluated
    assert not Path("/tmp/flowtrace-pwned").exists()


@st.composite
def statements(draw: st.DrawFn, depth: int, chaos: bool) -> list[str]:
    """A random function body (lines, indented by four spaces per level)."""

    def e(kind: str = "any") -> str:
        if chaos:
            kind = "any"
        elif kind == "any":
            kind = draw(st.sampled_from(KINDS))
        return draw(expressions(kind, 2, chaos))

    lines: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        choice = draw(st.integers(0, 11 if not chaos else 17))
        if choice == 0:
            lines.append(f"v = {e('int')}")
        elif choice == 1:
            lines.append(f"w = {e('list')}")
        elif choice == 2:
            lines.append(f"v += {e('int')}")
        elif choice in (3, 4) and depth == 0:
            lines.append("pass")
        elif choice in (3, 4):
            lines.append(f"if {e('bool')}:")
            lines += ["    " + line for line in draw(statements(depth - 1, chaos))]
            if draw(st.booleans()):
                lines.append(f"elif {e('bool')}:")
                lines += ["    " + line for line in draw(statements(depth - 1, chaos))]
            lines.append("else:")
            lines += ["    " + line for line in draw(statements(depth - 1, chaos))]
        elif choice == 5:
            lines.append(f"return {e(draw(st.sampled_from(KINDS)))}")
        elif choice == 6:
            lines.append(f"assert {e('bool')}")
        elif choice == 7:
            lines.append(f"raise ValueError({e('int')})")
        elif choice == 8:
            lines.append(f"v, u = {e('int')}, {e('int')}")
        elif choice == 9:
            lines.append(f"w = {e('list')} if {e('bool')} else {e('list')}")
        elif choice == 10:
            lines.append("pass")
        elif choice == 11:
            lines.append(f"w += {e('list')}")
        elif choice == 12:
            lines.append(f"self.out = {e()}")
        elif choice == 13:
            lines.append(f"self.model.setter({e()}, k={e()})")
        elif choice == 14:
            lines += [f"for x in {e()}:", "    self.x = x"]
        elif choice == 15:
            lines += [f"while {e()}:", "    return 1"]
        elif choice == 16:
            lines.append(f"w.append({e()})")
        else:
            lines += ["with self.lock:", f"    self.y = {e()}"]
    return lines


def function_source(body: list[str]) -> str:
    return "def f(a, L):\n" + "".join(f"    {line}\n" for line in body)


@FUNCTION_PROPERTY
@given(statements(2, chaos=False), st.integers(-3, 3), st.lists(st.integers(-3, 3), max_size=4))
def test_run_function_is_sound_against_python(body: list[str], a: int, values: list[int]) -> None:
    source = function_source(body)
    result = run_function(source, {"a": a, "L": values}, NAMES)
    namespace: dict[str, Any] = {"__builtins__": SAFE_BUILTINS, **NAMES}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(source, "<oracle>", "exec"), namespace)  # noqa: S102 - test oracle
            ok, theirs = True, namespace["f"](a, list(values))
    except Exception as exc:
        ok, theirs = False, exc
    if result.raised is not None:
        assert not ok, f"we report {result.raised} but Python returned {theirs!r}\n{source}"
        return
    clean = not result.unevaluated and result.stopped_at is None
    if not ok:
        assert not clean, f"Python raised {theirs!r} but our run looks complete\n{source}"
    elif clean:
        assert same(result.returned, theirs), (source, result.returned, theirs)


@FUNCTION_PROPERTY
@given(statements(2, chaos=True))
def test_run_function_survives_generated_python(body: list[str]) -> None:
    source = function_source(body)
    with nothing_runs():
        result = run_function(source, {"a": 1, "L": [1, 2]}, NAMES)
    assert isinstance(result, FunctionRun)
    assert all(not isinstance(w.value, CannotEvaluate) for w in result.writes)
    if result.stopped_at is not None:
        assert result.unevaluated
    assert not (result.raised is not None and result.returned_early)


def test_for_over_concrete_ids_runs_its_body_once_per_item() -> None:
    result = run("self.seen = []\nfor v in ids:\n    self.last = v + 1", {"ids": [2, 5]})
    assert [(w.target, w.value) for w in result.writes] == [("self.seen", []), ("self.last", 3), ("self.last", 6)]
    assert result.stopped_at is None and result.raised is None


def test_for_with_break_or_else_is_still_skipped() -> None:
    result = run("for v in ids:\n    break\nself.x = 1", {"ids": [2]})
    assert result.unevaluated == ("cannot evaluate: for statement",)
    assert [w.target for w in result.writes] == ["self.x"]


def test_a_written_attribute_is_read_back() -> None:
    """``self.layers_to_capture = ids`` then ``for i in self.layers_to_capture``: the loop sees the ids."""
    result = run("self.chosen = ids\nfor i in self.chosen:\n    self.last = i", {"ids": [4, 1]})
    assert [w.value for w in result.writes] == [[4, 1], 4, 1]
    unknown = run("self.chosen = self.other\nself.copy = self.chosen", {}, {"self.chosen": [9]})
    assert unknown.writes[-1].value is None  # the stale outer binding is not used after the write


def test_indexing_the_layer_stack_out_of_range_raises_index_error() -> None:
    """``setattr(self.layers[i], ...)`` for each id: Python raises for ids past the stack
    (negatives wrap like a ModuleList); an index inside it is just not a value we model."""
    body = "for i in ids:\n    setattr(self.layers[i], 'flagged', True)"
    names = {"self.layers": LayerStack(4)}
    assert run(body, {"ids": [0, -4, 3]}, names).raised is None
    bad = run(body, {"ids": [1, 4]}, names)
    assert bad.raised == "IndexError: index 4 is out of range for 4 layers (self.layers[i])" and bad.raised_line == 3
    assert run(body, {"ids": [-5]}, names).raised.startswith("IndexError: index -5")


def test_true_division_is_exact_and_only_round_or_int_make_it_an_index():
    # engines spell an evenly spread layout as round(start + i * span / (n - 1))
    layout = "[int(round(1 + (i * (L - 4)) / (N - 1))) for i in range(N)]"
    assert evaluate(layout, {"L": 36, "N": 5}) == [1, 9, 17, 25, 33]
    assert evaluate(layout, {"L": 32, "N": 6}) == [1, 7, 12, 18, 23, 29]  # 6.6, 12.2, 17.8, 23.4 rounded
    assert evaluate("round(5 / 2)", {}) == 2 and evaluate("round(7 / 2)", {}) == 4  # half to even
    assert evaluate("int(7 / 2)", {}) == 3 and evaluate("L / 2 == 18", {"L": 36}) is True
    # unary minus is the - of a quotient too: -3.5 rounds half to even, to -4; int() truncates to -3
    assert evaluate("round(-(7 / 2))", {}) == -4 and evaluate("int(-(7 / 2))", {}) == -3
    # a quotient never leaves the evaluator: engine code would hold a float there
    # a quotient is no index, no range bound, and takes no floor division (a float would give a float)
    for refused in ("[1, 2][L / 36]", "range(L / 2)", "L / 2 // 1", "round(L / 3, 1)", "L / 0", "[L / 2]"):
        with pytest.raises(CannotEvaluate):
            evaluate(refused, {"L": 36})


def test_runs_of_one_source_unparse_each_node_once() -> None:
    """A setter inherited by many models is interpreted once per row: the second run of the same
    source reads every node's text from the first (and ``x += y`` does not add a node per run)."""
    source = "def set_ids(self, ids):\n    v = (1,)\n    for i in ids:\n        v += (i,)\n    self.x = v[len(ids)]\n"
    calls: list[str] = []
    real = ast.unparse

    def counted(node: ast.AST) -> str:
        text = real(node)
        calls.append(text)
        return text

    with mock.patch.object(safe_eval.ast, "unparse", counted):
        first = run_function(source, {"ids": [3, 4]}, {})
        after_first = len(calls)
        second = run_function(source, {"ids": [5, 6]}, {})
    assert first.writes[0].value == 4 and second.writes[0].value == 6
    assert after_first > 0 and len(calls) == after_first
