"""Training conventions: what a draft's layer ids meant when it was trained (``rules/training/*.toml``).

A convention says how an id maps to a boundary (DESIGN.md section 2): ``layer_output`` ("output
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

from flowtrace.engines.profiles import rules_directory
from flowtrace.errors import ProfileError

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

    @property
    def embedding_id(self) -> int:
        """The id that names the embedding output (b = 0) in this convention."""
        return -1 if self.meaning == Meaning.LAYER_OUTPUT else 0


class LayoutError(ValueError):
    """An ids expression that is not a list of integer arithmetic on L."""


_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__}


def _value(node: ast.AST, layers: int) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and node.id == "L":
        return layers
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, layers)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        right = _value(node.right, layers)
        if isinstance(node.op, ast.FloorDiv) and right == 0:
            raise LayoutError("division by zero")
        return _OPS[type(node.op)](_value(node.left, layers), right)
    raise LayoutError(f"only integers, L, +, -, * and // are allowed, found {ast.dump(node)[:60]}")


def layout(expression: str, layers: int) -> tuple[int, ...]:
    """The ids an expression such as ``[1, L // 2 - 1, L - 4]`` names for ``layers`` layers.
    A tiny evaluator of its own: this is data the loaders validate, below the analysis stage."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as exc:
        raise LayoutError(f"not an expression ({exc.msg})") from None
    if not isinstance(tree, (ast.List, ast.Tuple)):
        raise LayoutError("expected a list such as [2, L // 2, L - 3]")
    return tuple(_value(e, layers) for e in tree.elts)


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


def to_boundaries(meaning: str, ids: tuple[int, ...] | list[int], layers: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
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
                notes.append(f"id {i} is HF hidden_states[{i}], the output after the final norm: no engine boundary equals it")
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
            )
        except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ProfileError(f"{path}: invalid training profile ({type(exc).__name__}: {exc})") from None
        if conv.meaning not in MEANINGS:
            raise ProfileError(f"{path}: meaning must be one of {', '.join(MEANINGS)}, found {conv.meaning!r}")
        try:
            layout(conv.default_ids, 32)
        except LayoutError as exc:
            raise ProfileError(f"{path}: default_ids {conv.default_ids!r}: cannot evaluate it ({exc})") from None
        out[conv.name] = conv
    return out


__all__ = [
    "MEANINGS", "LayoutError", "Meaning", "TrainingConvention", "id_range", "invalid_ids", "layout", "load_conventions", "to_boundaries",
]
