"""Training conventions: what a draft's layer ids meant when it was trained (``rules/training/*.toml``).

A convention says how an id maps to a boundary (README, Vocabulary): ``layer_output`` ("output
of layer i": b = i + 1, -1 = the embedding), ``boundary`` (b = i) or ``hf_index`` (HF
``output_hidden_states`` index: b = k for k < L; index L is after the final norm, no engine
boundary). It also names the trainer's default layout (``default_ids``, an expression in L) used
when a draft config carries no ids. compat, ``compat --fix``, the draft catalogue and the
grading of findings all read conventions through this module: the arithmetic lives here once.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from flowtrace.engines.profiles import rules_directory
from flowtrace.errors import ProfileError
from flowtrace.model.safe_eval import CannotEvaluate, Evaluator, parse_expression

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class Meaning:
    """How an id maps to a boundary (the ``meaning`` key)."""

    LAYER_OUTPUT = "layer_output"
    BOUNDARY = "boundary"
    HF_INDEX = "hf_index"


MEANINGS = (Meaning.LAYER_OUTPUT, Meaning.BOUNDARY, Meaning.HF_INDEX)


@dataclass(frozen=True, slots=True)
class TrainingConvention:
    name: str
    description: str
    layer_id_keys: tuple[str, ...]
    meaning: str
    default_ids: str
    detect_keys: tuple[str, ...]
    # The draft-config keys holding what the trainer computed its default layout from: the
    # target's layer count it was trained for (unset or absent: the target's L) and the draft's
    # own layer count (N in ``default_ids``).
    layers_key: str = ""
    draft_layers_key: str = ""

    @property
    def embedding_id(self) -> int:
        """The id that names the embedding output (b = 0) in this convention."""
        return -1 if self.meaning == Meaning.LAYER_OUTPUT else 0


class LayoutError(ValueError):
    """An ids expression that is not a list of integer arithmetic on L (and N)."""


# What a layout expression may name: the target's layer count, and the draft's (a trainer that
# spreads one target layer per draft layer, as DFlash's does, needs it).
TARGET_LAYERS, DRAFT_LAYERS = "L", "N"

# The layout language (docs/drafts.md) is a subset of what the safe evaluator takes: it is checked
# here, node by node, and then evaluated there, so a layout and engine code share one arithmetic
# (``/`` exact, ``round`` half to even, ``range`` of a quotient refused, as Python refuses a float).
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Div)
_COMPARISONS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_MAX_SHOWN = 60


def _shown(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _is_call(node: ast.AST, name: str) -> TypeGuard[ast.Call]:
    """``name(x)``: one positional argument, no keywords."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return False
    return node.func.id == name and len(node.args) == 1 and not node.keywords


def _check_arithmetic(node: ast.AST, names: frozenset[str]) -> None:
    """One arithmetic node: integers, names, + - * // /, unary minus, ``round(x)``."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise LayoutError(f"unknown name {node.id!r} (only L, N and a comprehension's own variable)")
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check_arithmetic(node.operand, names)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC):
        _check_arithmetic(node.left, names)
        _check_arithmetic(node.right, names)
    elif isinstance(node, ast.Call) and _is_call(node, "round"):
        _check_arithmetic(node.args[0], names)
    else:
        raise LayoutError(f"only integers, L, N, +, -, *, //, / and round() are allowed, found {_shown(node)}")


def _check_condition(node: ast.AST, names: frozenset[str]) -> None:
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], _COMPARISONS)):
        raise LayoutError(f"a condition is one comparison such as N == 1, found {_shown(node)}")
    _check_arithmetic(node.left, names)
    _check_arithmetic(node.comparators[0], names)


def _check_comprehension(node: ast.ListComp, names: frozenset[str]) -> None:
    """``[expr for i in range(n)]``: the one loop a spread-over-the-layers layout needs."""
    gen = node.generators[0]
    simple = len(node.generators) == 1 and not gen.ifs and not gen.is_async
    target, count = gen.target, gen.iter
    if not (simple and isinstance(target, ast.Name) and _is_call(count, "range")):
        raise LayoutError(f"a comprehension is [expression for i in range(count)], found {_shown(node)}")
    _check_arithmetic(count.args[0], names)
    _check_arithmetic(node.elt, names | {target.id})


def _check_elements(node: ast.AST, names: frozenset[str]) -> None:
    if isinstance(node, ast.IfExp):
        _check_condition(node.test, names)
        _check_elements(node.body, names)
        _check_elements(node.orelse, names)
    elif isinstance(node, (ast.List, ast.Tuple)):
        for element in node.elts:
            _check_arithmetic(element, names)
    elif isinstance(node, ast.ListComp):
        _check_comprehension(node, names)
    else:
        raise LayoutError(
            "expected a list such as [2, L // 2, L - 3] (or a comprehension, or `A if N == 1 else B`), "
            f"found {_shown(node)}"
        )


def _parse(expression: object) -> ast.expr:
    try:
        return parse_expression(expression)
    except CannotEvaluate as exc:
        raise LayoutError(f"not an expression ({exc.construct})") from None


def layout(expression: str, layers: int, draft_layers: int | None = None) -> tuple[int, ...]:
    """The ids an expression such as ``[1, L // 2 - 1, L - 4]`` names for ``layers`` layers
    (``draft_layers``: N, for a trainer whose layout depends on the draft's layer count).

    The expression is checked against the layout language, then evaluated by the safe evaluator
    of engine code with L and N bound: one arithmetic for a trainer's layout and an engine's."""
    tree = _parse(expression)
    _check_elements(tree, frozenset((TARGET_LAYERS, DRAFT_LAYERS)))
    names = {TARGET_LAYERS: layers} if draft_layers is None else {TARGET_LAYERS: layers, DRAFT_LAYERS: draft_layers}
    try:
        values = Evaluator(names).value(tree, {})
    except CannotEvaluate as exc:
        if exc.construct == DRAFT_LAYERS:
            raise LayoutError("the layout needs N (the draft's layer count) and none is known") from None
        raise LayoutError(f"cannot evaluate {exc.construct}") from None
    assert isinstance(values, (list, tuple))  # the language's top level: a list, a tuple or a comprehension
    ids = tuple(v for v in values if isinstance(v, int))  # a quotient (a Fraction) is no id
    if len(ids) != len(values):
        raise LayoutError(f"ids must be integers, the expression gives {[str(v) for v in values]} (round() a division)")
    return ids


def needs_draft_layers(expression: str) -> bool:
    """Whether a layout expression names N (the draft's layer count)."""
    try:
        tree = parse_expression(expression)
    except CannotEvaluate:
        return False
    return any(isinstance(n, ast.Name) and n.id == DRAFT_LAYERS for n in ast.walk(tree))


def id_range(meaning: str, layers: int) -> tuple[int, int]:
    """The ids that name a capturable state in ``meaning`` for ``layers`` layers (inclusive):
    "output of layer i" runs from the embedding (-1) to the last layer (L - 1); boundaries
    from 0 to L; HF indices from 0 to L (L being the post-norm state, which compat notes)."""
    if meaning == Meaning.LAYER_OUTPUT:
        return -1, layers - 1
    return 0, layers


def invalid_ids(meaning: str, ids: object, layers: int) -> str | None:
    """Why ``ids`` cannot be a draft's layer ids under ``meaning`` (None: they can): not a
    list of integers, duplicates, or outside :func:`id_range`."""
    if not isinstance(ids, (list, tuple)) or not ids:
        return "expected a non-empty list of integers"
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return f"expected integers, found {list(ids)!r}"
    low, high = id_range(meaning, layers)
    outside = [i for i in ids if not low <= i <= high]
    if outside:
        return f"{outside} outside {low}..{high} (the valid range for {meaning} ids with L = {layers})"
    if len(set(ids)) != len(ids):
        return f"duplicates in {list(ids)}"
    return None


def to_boundaries(
    meaning: str, ids: tuple[int, ...] | list[int], layers: int
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(boundaries, notes): what ``ids`` name under ``meaning``. An HF index of L is the state
    after the final norm, which no engine boundary equals: it maps to a sentinel (-L) that never
    matches a served boundary, with a note saying so."""
    notes: list[str] = []
    out: list[int] = []
    for i in ids:
        if meaning == Meaning.LAYER_OUTPUT:
            out.append(0 if i == -1 else i + 1)
        elif meaning == Meaning.HF_INDEX:
            if i == layers:
                notes.append(
                    f"id {i} is HF hidden_states[{i}], the output after the final norm: no engine boundary equals it"
                )
                out.append(-layers)
            else:
                out.append(i % (layers + 1) if i < 0 else i)
        else:
            out.append(i)
    return tuple(out), tuple(notes)


def load_conventions(directory: Path | None = None) -> dict[str, TrainingConvention]:
    """Every convention of ``<rules>/training/*.toml``, by name (a malformed file is a
    :class:`ProfileError` naming it)."""
    base = (directory or rules_directory()) / "training"
    out: dict[str, TrainingConvention] = {}
    for path in sorted(base.glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))["training"]
            conv = TrainingConvention(
                name=data["name"],
                description=data["description"],
                layer_id_keys=tuple(data["layer_id_keys"]),
                meaning=data["meaning"],
                default_ids=data["default_ids"],
                detect_keys=tuple(data.get("detect_keys", ())),
                layers_key=data.get("layers_key", ""),
                draft_layers_key=data.get("draft_layers_key", ""),
            )
        except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ProfileError(f"{path}: invalid training profile ({type(exc).__name__}: {exc})") from None
        if needs_draft_layers(conv.default_ids) and not conv.draft_layers_key:
            raise ProfileError(
                f"{path}: default_ids names N (the draft's layer count): "
                "say where a draft config holds it (draft_layers_key)"
            )
        if conv.meaning not in MEANINGS:
            raise ProfileError(f"{path}: meaning must be one of {', '.join(MEANINGS)}, found {conv.meaning!r}")
        try:
            layout(conv.default_ids, 32, 5)
        except LayoutError as exc:
            raise ProfileError(f"{path}: default_ids {conv.default_ids!r}: cannot evaluate it ({exc})") from None
        out[conv.name] = conv
    return out


__all__ = [
    "DRAFT_LAYERS", "MEANINGS", "TARGET_LAYERS", "LayoutError", "Meaning", "TrainingConvention", "id_range",
    "invalid_ids",
    "layout", "load_conventions", "needs_draft_layers", "to_boundaries",
]
