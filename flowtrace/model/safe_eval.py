"""Evaluate layer-id expressions over concrete values without running them: the safe evaluator.

Engines choose the decoder layers whose hidden states they capture in tiny setters
(``set_eagle3_layers_to_capture``, ``set_aux_hidden_state_layers``, ...). To report which
ids an engine really captures we must evaluate those bodies on concrete inputs, but the
code is untrusted text from a downloaded wheel: nothing here calls ``eval``, ``exec`` or
``compile`` on it. We walk the stdlib ``ast`` tree and interpret a small, side-effect
free subset; anything outside it raises :class:`CannotEvaluate` (or, inside
:func:`~flowtrace.analysis.function_interpreter.run_function`, is recorded in ``unevaluated``)
instead of being guessed.

It imports nothing of flowtrace, so it sits in the lowest stage: the training conventions'
default layouts (``flowtrace.engines.training``, docs/drafts.md) are a smaller language evaluated
here too, so a trainer's ``round(1 + i * (L - 4) / (N - 1))`` and an engine's same line give the
same ids.

Names: before any expression node is evaluated, ``ast.unparse(node)`` is looked up in the
caller's ``names`` mapping; a hit is the node's value. Keys must therefore be in
``ast.unparse`` form (single quotes, canonical spacing): use :func:`normalise` or
:func:`normalise_names` on hand-written keys. Values must be plain data (int, bool, None,
str, list, tuple, set, frozenset, range, :class:`LayerStack`); anything else is refused.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

__all__ = [
    "CannotEvaluate",
    "LayerStack",
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "MAX_INT",
    "MAX_STEPS",
    "WouldRaise",
    "evaluate",
    "normalise",
    "normalise_names",
    "parse_expression",
]

MAX_ELEMENTS: Final = 100_000  # longest list/range/str any operation may produce
MAX_INT: Final = 10**12  # largest int magnitude: layer ids are small, huge ints mean a wrong guess
MAX_DEPTH: Final = 100  # deepest AST we walk, so recursion stays far below the interpreter limit
MAX_STEPS: Final = 1_000_000  # node evaluations per call: bounds nested comprehensions
MAX_SOURCE: Final = 1_000_000  # characters of source we agree to parse
_MAX_VALUE_DEPTH: Final = 32  # nesting of caller-supplied values
_MAX_REPR: Final = 80


class CannotEvaluate(Exception):
    """Raised for anything outside the supported subset; never a guess.

    ``construct`` is the offending source (``ast.unparse`` form), possibly followed by a
    parenthesised reason, or a short description.
    """

    def __init__(self, construct: str) -> None:
        super().__init__(f"cannot evaluate: {construct}")
        self.construct = construct

    def __reduce__(self) -> tuple[type[CannotEvaluate], tuple[str, ...]]:
        # The default would re-prefix the message on unpickling (parse pools pickle these).
        return (type(self), (self.construct,))


class WouldRaise(CannotEvaluate):
    """Python itself would raise here, whatever the unknown parts are (iterating None):
    inside :func:`~flowtrace.analysis.function_interpreter.run_function` this ends the run as
    ``raised``, not as unevaluated."""

    def __init__(self, construct: str, error: str) -> None:
        super().__init__(f"{construct} ({error})")
        self.error = error
        self.construct = construct

    def __reduce__(self) -> tuple[type[CannotEvaluate], tuple[str, ...]]:
        return WouldRaise, (self.construct, self.error)


@dataclass(frozen=True, slots=True)
class LayerStack:
    """Stands for a module list such as ``self.layers``: only ``len()`` is defined on it.

    Truth tests, comparisons and iteration are refused: a real ``nn.ModuleList`` would
    compare by identity, which a number cannot model.
    """

    count: int

    def __post_init__(self) -> None:
        if type(self.count) is not int or self.count < 0:
            raise ValueError(f"LayerStack.count must be a non-negative int, got {self.count!r}")




class _Iterator:
    """Result of a generator expression, ``reversed`` or ``enumerate``.

    Items are computed eagerly (the subset has no side effects, so only the point at which
    an error surfaces can differ, and an error is CannotEvaluate either way) but consumed
    once, like the Python objects they stand for. Never handed back to callers.
    """

    __slots__ = ("_items",)

    def __init__(self, items: list[object]) -> None:
        self._items = iter(items)

    def __iter__(self) -> _Iterator:
        return self

    def __next__(self) -> object:
        return next(self._items)

    def __repr__(self) -> str:
        return "<iterator>"


class _Unbound:
    """Marks a local that exists (Python's scoping says so) but holds no value yet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unbound>"


_MISSING: Final = object()
UNBOUND: Final = _Unbound()
_NONE_TYPE: Final = type(None)
_INTS: Final = (int, bool)
_ITERABLES: Final = (list, tuple, set, frozenset, str, range, _Iterator)
_SEQUENCES: Final = (list, tuple, str, range)
IMMUTABLE: Final[tuple[type, ...]] = (int, bool, str, _NONE_TYPE, range, frozenset, LayerStack, _Unbound)
# Methods of list/set/str that never change their receiver.
PURE_METHODS: Final = frozenset(
    {"copy", "count", "index", "union", "intersection", "difference", "symmetric_difference", "issubset",
     "issuperset", "isdisjoint", "startswith", "endswith", "join", "split", "strip", "lower", "upper",
     "replace", "find", "format"}
)
_SYMBOLS: Final[dict[type[ast.AST], str]] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Div: "/",
}
# True division is exact: a quotient is a Fraction, which only +, -, *, /, comparisons, round() and
# int() take (Python's float would do more, but a layer index is never a float: round() or int()
# turns the quotient into one, as engines write it, e.g. round(start + i * span / (n - 1))).
_REAL_OPS: Final = (ast.Add, ast.Sub, ast.Mult, ast.Div)


def _is_int(value: object) -> bool:
    return type(value) in _INTS


def _is_number(value: object) -> bool:
    return type(value) in _INTS or type(value) is Fraction


def _type_name(value: object) -> str:
    return "iterator" if isinstance(value, _Iterator) else type(value).__name__


def short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def _too_deep(tree: ast.AST, limit: int) -> bool:
    """Iterative depth check, done before anything recursive (unparse, evaluation) runs."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return False


def parse_source(source: object, mode: str) -> ast.AST:
    if not isinstance(source, str):
        raise CannotEvaluate(f"source of type {type(source).__name__}")
    if len(source) > MAX_SOURCE:
        raise CannotEvaluate("source too long")
    try:
        tree = ast.parse(source, mode=mode)
    except (SyntaxError, ValueError, OverflowError) as exc:
        raise CannotEvaluate(f"invalid syntax ({type(exc).__name__}: {exc})") from None
    except (RecursionError, MemoryError):
        raise CannotEvaluate("source nested too deeply to parse") from None
    if _too_deep(tree, MAX_DEPTH):
        raise CannotEvaluate("source nested too deeply")
    return tree


def parse_expression(expression: object) -> ast.expr:
    """The body of one expression, parsed under the evaluator's limits (CannotEvaluate otherwise)."""
    if isinstance(expression, str):
        expression = expression.strip()  # as eval() does; mode="eval" rejects indentation
    tree = parse_source(expression, "eval")
    assert isinstance(tree, ast.Expression)
    return tree.body


def normalise(expression: str) -> str:
    """The key :func:`evaluate` looks up for ``expression``: its ``ast.unparse`` form.

    ``normalise('hasattr(self.lm, "f")') == "hasattr(self.lm, 'f')"``. Raises
    CannotEvaluate when ``expression`` does not parse.
    """
    return ast.unparse(parse_expression(expression))


def normalise_names(names: Mapping[str, object]) -> dict[str, object]:
    """``names`` re-keyed through :func:`normalise`, for hand-written bindings."""
    return {normalise(key): value for key, value in names.items()}


def check_value(value: object, label: str) -> None:
    """Refuse values we cannot reason about, so no caller object's code ever runs."""
    stack: list[tuple[object, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_ELEMENTS:
            raise CannotEvaluate(f"{label} (too large)")
        kind = type(item)
        if kind is int:
            if abs(item) > MAX_INT:  # type: ignore[arg-type]
                raise CannotEvaluate(f"{label} (too large)")
        elif kind is str:
            if len(item) > MAX_ELEMENTS:  # type: ignore[arg-type]
                raise CannotEvaluate(f"{label} (too large)")
        elif kind is range:
            assert isinstance(item, range)
            bounds = (item.start, item.stop, item.step)
            if any(abs(bound) > MAX_INT for bound in bounds) or len(item) > MAX_ELEMENTS:
                raise CannotEvaluate(f"{label} (too large)")
        elif kind in (list, tuple, set, frozenset):
            if depth >= _MAX_VALUE_DEPTH:
                raise CannotEvaluate(f"{label} (nested too deeply)")
            stack.extend((element, depth + 1) for element in item)  # type: ignore[attr-defined]
        elif kind not in (bool, _NONE_TYPE, LayerStack):
            raise CannotEvaluate(f"{label} (value of unsupported type {kind.__name__})")


def internal_value(value: object) -> str | None:
    """What in ``value`` is the evaluator's own and never leaves it (None: nothing): an iterator,
    or an exact quotient (engine code rounds it into an index; a bare one would be a float there)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Iterator):
            return "iterator value"
        if type(item) is Fraction:
            return "a quotient, not an integer"
        if type(item) in (list, tuple, set, frozenset):
            stack.extend(item)  # type: ignore[arg-type]
    return None


_Comprehension = ast.ListComp | ast.SetComp | ast.GeneratorExp
_Builtin = Callable[["Evaluator", ast.Call, list[object], dict[str, object]], object]
_ChoiceHook = Callable[[ast.IfExp, bool, dict[str, object]], None]


@dataclass(frozen=True, slots=True)
class NodeTexts:
    """What the evaluator reads off a node that depends on the node alone: its source text and
    the names it loads. One per tree that is only read: a setter's source is interpreted once per
    row that runs it (dozens of models inherit one), and each run would unparse the same nodes."""

    texts: dict[ast.AST, str] = field(default_factory=dict)
    loads: dict[ast.AST, frozenset[str]] = field(default_factory=dict)


class Evaluator:
    """Interprets expression nodes; shared by :func:`evaluate` and
    :func:`~flowtrace.analysis.function_interpreter.run_function`.

    ``scope`` (locals) is passed explicitly because comprehensions open nested scopes.
    """

    def __init__(
        self, names: Mapping[str, object], on_choice: _ChoiceHook | None = None, node_texts: NodeTexts | None = None
    ) -> None:
        self.names = names
        self.on_choice = on_choice
        self.steps = 0
        self.comprehension_depth = 0
        memo = node_texts if node_texts is not None else NodeTexts()
        self._texts, self._loads = memo.texts, memo.loads
        self._bound: dict[str, object] = {}
        self._forgotten: set[str] = set()  # written by the run in a way we could not follow

    # -- entry points (the only places that may see non-CannotEvaluate errors) --

    def value(self, node: ast.expr, scope: dict[str, object]) -> object:
        """Evaluate ``node``; every failure comes out as CannotEvaluate."""
        try:
            return self.calc(node, scope)
        except CannotEvaluate:
            raise
        except RecursionError:
            raise CannotEvaluate(f"{self.safe_text(node)} (nested too deeply)") from None
        except MemoryError:
            raise CannotEvaluate(f"{self.safe_text(node)} (too large)") from None
        except Exception as exc:  # a safety net: the contract is "only CannotEvaluate"
            raise CannotEvaluate(f"{self.safe_text(node)} ({type(exc).__name__}: {exc})") from None

    def export(self, node: ast.expr, scope: dict[str, object]) -> object:
        """Evaluate for a caller: the evaluator's own values (iterators, quotients) never leave the module."""
        result = self.value(node, scope)
        internal = internal_value(result)
        if internal:
            raise CannotEvaluate(f"{self.text(node)} ({internal})")
        return result

    def truth(self, value: object, node: ast.expr) -> bool:
        if type(value) is LayerStack:
            raise CannotEvaluate(f"{self.text(node)} (truth value of a layer stack)")
        return bool(value)

    # -- helpers --

    def text(self, node: ast.AST) -> str:
        text = self._texts.get(node)
        if text is None:
            text = self._texts[node] = ast.unparse(node)
        return text

    def safe_text(self, node: ast.AST) -> str:
        try:
            return self.text(node)
        except Exception:  # RecursionError included: only used while reporting a failure
            return "expression"

    def _loaded_names(self, node: ast.AST) -> frozenset[str]:
        loaded = self._loads.get(node)
        if loaded is None:
            loaded = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
            self._loads[node] = loaded
        return loaded

    def _may_look_up(self, node: ast.AST, scope: dict[str, object]) -> bool:
        # Unbound locals (held as UNBOUND) block the lookup as well as bound ones.
        return not scope or scope.keys().isdisjoint(self._loaded_names(node))

    def lookup(self, key: str) -> object:
        """``names[key]`` after a one-time type check, or _MISSING."""
        cached = self._bound.get(key, _MISSING)
        if cached is not _MISSING:
            return cached
        found = self.names.get(key, _MISSING) if key not in self._forgotten else _MISSING
        if found is _MISSING:
            return _MISSING
        check_value(found, key)
        self._bound[key] = found
        return found

    def _int(self, value: int, node: ast.AST) -> int:
        if abs(value) > MAX_INT:
            raise CannotEvaluate(f"{self.text(node)} (too large)")
        return value

    def _sized(self, value: object, node: ast.AST) -> object:
        if len(value) > MAX_ELEMENTS:  # type: ignore[arg-type]
            raise CannotEvaluate(f"{self.text(node)} (too large)")
        return value

    def _iterable(self, value: object, node: ast.AST) -> Iterable[object]:
        if value is None:
            raise WouldRaise(self.text(node), "TypeError: 'NoneType' object is not iterable")
        if type(value) not in _ITERABLES:
            raise CannotEvaluate(f"{self.text(node)} ({_type_name(value)} is not iterable here)")
        return value  # type: ignore[return-value]

    # -- the interpreter proper --

    def calc(self, node: ast.AST, scope: dict[str, object]) -> object:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise CannotEvaluate(f"{self.text(node)} (too much work)")
        kind = type(node)
        if kind is ast.Constant:
            return self._constant(node)  # type: ignore[arg-type]
        if kind is ast.Name:
            name = node.id  # type: ignore[attr-defined]
            if name in scope:
                found = scope[name]
                if found is UNBOUND:
                    raise CannotEvaluate(f"{name} (unbound local)")
                return found
            found = self.lookup(name)
            if found is _MISSING:
                raise CannotEvaluate(name)
            return found
        # A caller's binding describes the caller's world; it cannot be about an
        # expression that reads one of our locals (e.g. ``x + 1`` inside a comprehension).
        if (self.names or self._bound) and self._may_look_up(node, scope):
            found = self.lookup(self.text(node))
            if found is not _MISSING:
                return found
        handler = _HANDLERS.get(kind)
        if handler is None:
            raise CannotEvaluate(self.text(node))
        return handler(self, node, scope)

    def _constant(self, node: ast.Constant) -> object:
        value = node.value
        kind = type(value)
        if kind is int:
            return self._int(value, node)  # type: ignore[arg-type]  # kind is int
        if kind is str:
            return self._sized(value, node)
        if kind in (bool, _NONE_TYPE):
            return value
        raise CannotEvaluate(f"{self.text(node)} ({kind.__name__} constant)")

    def _unary(self, node: ast.UnaryOp, scope: dict[str, object]) -> object:
        op = node.op
        if isinstance(op, ast.Invert):
            raise CannotEvaluate(self.text(node))
        operand = self.calc(node.operand, scope)
        if isinstance(op, ast.Not):
            return not self.truth(operand, node.operand)
        if not _is_number(operand):
            raise CannotEvaluate(f"{self.text(node)} (unary operator on {_type_name(operand)})")
        return -operand if isinstance(op, ast.USub) else +operand  # type: ignore[operator]

    def _binary(self, node: ast.BinOp, scope: dict[str, object]) -> object:
        if type(node.op) not in _SYMBOLS:
            raise CannotEvaluate(self.text(node))
        left = self.calc(node.left, scope)
        right = self.calc(node.right, scope)
        return self.arithmetic(node.op, left, right, node)

    def arithmetic(self, op: ast.operator, left: object, right: object, node: ast.AST) -> object:
        kind = type(op)
        if _is_number(left) and _is_number(right) and (kind is ast.Div or not (_is_int(left) and _is_int(right))):
            return self._quotient(kind, left, right, node)  # type: ignore[arg-type]
        if _is_int(left) and _is_int(right):
            a: int = left  # type: ignore[assignment]
            b: int = right  # type: ignore[assignment]
            if kind is ast.Add:
                result = a + b
            elif kind is ast.Sub:
                result = a - b
            elif kind is ast.Mult:
                result = a * b
            elif b == 0:
                raise CannotEvaluate(f"{self.text(node)} (division by zero)")
            elif kind is ast.FloorDiv:
                result = a // b
            else:
                result = a % b
            return self._int(result, node)
        if kind is ast.Add and type(left) is type(right) and type(left) in (list, tuple, str):
            if len(left) + len(right) > MAX_ELEMENTS:  # type: ignore[arg-type]
                raise CannotEvaluate(f"{self.text(node)} (too large)")
            return left + right  # type: ignore[operator]
        symbol = _SYMBOLS.get(kind, "?")
        raise CannotEvaluate(
            f"{self.text(node)} (unsupported {_type_name(left)} {symbol} {_type_name(right)})"
        )

    def _quotient(self, kind: type[ast.operator], left: Fraction | int, right: Fraction | int, node: ast.AST) -> object:
        """Arithmetic where a true division is involved, exactly (as Fractions)."""
        if kind not in _REAL_OPS:
            raise CannotEvaluate(f"{self.text(node)} (unsupported {_SYMBOLS.get(kind, '?')} on a quotient)")
        a, b = Fraction(left), Fraction(right)
        if kind is ast.Div and b == 0:
            raise CannotEvaluate(f"{self.text(node)} (division by zero)")
        result = a + b if kind is ast.Add else a - b if kind is ast.Sub else a * b if kind is ast.Mult else a / b
        if abs(result.numerator) > MAX_INT or result.denominator > MAX_INT:
            raise CannotEvaluate(f"{self.text(node)} (too large)")
        return result

    def _boolean(self, node: ast.BoolOp, scope: dict[str, object]) -> object:
        is_and = isinstance(node.op, ast.And)
        result: object = None
        for operand in node.values:
            result = self.calc(operand, scope)
            if self.truth(result, operand) != is_and:
                return result
        return result

    def _compare(self, node: ast.Compare, scope: dict[str, object]) -> object:
        left = self.calc(node.left, scope)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.calc(comparator, scope)
            if not self.compare(op, left, right, node):
                return False
            left = right
        return True

    def compare(self, op: ast.cmpop, left: object, right: object, node: ast.AST) -> bool:
        kind = type(op)
        if kind in (ast.Is, ast.IsNot):
            if not any(v is None or v is True or v is False for v in (left, right)):
                raise CannotEvaluate(f"{self.text(node)} ('is' only with None, True or False)")
            return (left is right) == (kind is ast.Is)
        if type(left) is LayerStack or type(right) is LayerStack:
            raise CannotEvaluate(f"{self.text(node)} (comparison with a layer stack)")
        try:
            if kind is ast.Eq:
                return left == right
            if kind is ast.NotEq:
                return left != right
            if kind is ast.Lt:
                return bool(left < right)  # type: ignore[operator]
            if kind is ast.LtE:
                return bool(left <= right)  # type: ignore[operator]
            if kind is ast.Gt:
                return bool(left > right)  # type: ignore[operator]
            if kind is ast.GtE:
                return bool(left >= right)  # type: ignore[operator]
            container = self._iterable(right, node)
            found = left in container
            return found if kind is ast.In else not found
        except TypeError as exc:
            raise CannotEvaluate(f"{self.text(node)} ({exc})") from None

    def _ternary(self, node: ast.IfExp, scope: dict[str, object]) -> object:
        taken = self.truth(self.calc(node.test, scope), node.test)
        if self.on_choice is not None and self.comprehension_depth == 0:
            self.on_choice(node, taken, scope)
        return self.calc(node.body if taken else node.orelse, scope)

    def _subscript(self, node: ast.Subscript, scope: dict[str, object]) -> object:
        container = self.calc(node.value, scope)
        if type(container) is LayerStack:
            return self._layer(node, container, scope)
        if type(container) not in _SEQUENCES:
            raise CannotEvaluate(f"{self.text(node)} (subscript of {_type_name(container)})")
        sequence: list[object] = container  # type: ignore[assignment]
        index = node.slice
        if isinstance(index, ast.Slice):
            bounds = (index.lower, index.upper, index.step)
            parts = [None if p is None else self.calc(p, scope) for p in bounds]
            if not all(p is None or _is_int(p) for p in parts):
                raise CannotEvaluate(f"{self.text(node)} (slice bounds must be ints)")
            if parts[2] == 0:
                raise CannotEvaluate(f"{self.text(node)} (slice step is zero)")
            return sequence[slice(*parts)]  # type: ignore[arg-type]  # checked: ints or None
        position = self.calc(index, scope)
        if not _is_int(position):
            raise CannotEvaluate(f"{self.text(node)} (index of type {_type_name(position)})")
        try:
            return sequence[position]  # type: ignore[call-overload]
        except IndexError:
            raise CannotEvaluate(f"{self.text(node)} (index out of range)") from None

    def _layer(self, node: ast.Subscript, stack: LayerStack, scope: dict[str, object]) -> object:
        """``self.layers[i]``: a layer is no value we model, but an int index outside the
        stack raises IndexError in Python whatever the layers are (negatives wrap, as a
        ``ModuleList`` does)."""
        if isinstance(node.slice, ast.Slice):
            raise CannotEvaluate(f"{self.text(node)} (subscript of LayerStack: a slice)")
        position = self.calc(node.slice, scope)
        if _is_int(position) and not -stack.count <= position < stack.count:  # type: ignore[operator]
            raise WouldRaise(self.text(node), f"IndexError: index {position} is out of range for {stack.count} layers")
        raise CannotEvaluate(f"{self.text(node)} (subscript of LayerStack: a layer, not a value)")

    def remember(self, key: str, value: tuple[object] | None) -> None:
        """A run's own attribute write (``self.x = ids``): later reads of ``self.x`` see
        ``value[0]``; None (a write we could not follow) makes them fail instead."""
        if value is not None:
            try:
                check_value(value[0], key)
            except CannotEvaluate:
                value = None
        if value is None:
            self._bound.pop(key, None)
            self._forgotten.add(key)
        else:
            self._forgotten.discard(key)
            self._bound[key] = value[0]

    def _display(self, node: ast.List | ast.Tuple | ast.Set, scope: dict[str, object]) -> object:
        items = [self.calc(element, scope) for element in node.elts]
        if isinstance(node, ast.List):
            return items
        if isinstance(node, ast.Tuple):
            return tuple(items)
        return self._set(items, node)

    def _set(self, items: Iterable[object], node: ast.AST) -> set[object]:
        try:
            return set(items)
        except TypeError as exc:
            raise CannotEvaluate(f"{self.text(node)} ({exc})") from None

    def _comprehension(self, node: _Comprehension, scope: dict[str, object]) -> object:
        generators = node.generators
        if any(g.is_async for g in generators):
            raise CannotEvaluate(self.text(node))
        out: list[object] = []
        first = self.calc(generators[0].iter, scope)  # in the enclosing scope, as Python does
        inner = dict(scope)
        # Every target is local to the whole comprehension, even before it is bound.
        for generator in generators:
            for target in ast.walk(generator.target):
                if isinstance(target, ast.Name):
                    inner[target.id] = UNBOUND
        self.comprehension_depth += 1  # ternaries per element are not decisions worth listing
        try:
            self._loop(node, 0, first, inner, out)
        finally:
            self.comprehension_depth -= 1
        if isinstance(node, ast.ListComp):
            return out
        if isinstance(node, ast.SetComp):
            return self._set(out, node)
        return _Iterator(out)

    def _loop(
        self,
        node: _Comprehension,
        index: int,
        iterable: object,
        scope: dict[str, object],
        out: list[object],
    ) -> None:
        generator = node.generators[index]
        last = index + 1 == len(node.generators)
        for item in self._iterable(iterable, generator.iter):
            self.steps += 1
            self.bind(generator.target, item, scope)
            if not all(self.truth(self.calc(test, scope), test) for test in generator.ifs):
                continue
            if last:
                out.append(self.calc(node.elt, scope))
                if len(out) > MAX_ELEMENTS:
                    raise CannotEvaluate(f"{self.text(node)} (too large)")
            else:
                following = node.generators[index + 1].iter
                self._loop(node, index + 1, self.calc(following, scope), scope, out)

    def bind(self, target: ast.expr, value: object, scope: dict[str, object]) -> None:
        """Bind a comprehension target: a name or a (nested) tuple/list of names."""
        if isinstance(target, ast.Name):
            scope[target.id] = value
            return
        if not isinstance(target, (ast.Tuple, ast.List)):
            raise CannotEvaluate(f"{self.text(target)} (assignment target)")
        items = list(self._iterable(value, target))
        if len(items) != len(target.elts):
            raise CannotEvaluate(f"{self.text(target)} (cannot unpack {len(items)} values)")
        for element, item in zip(target.elts, items):
            self.bind(element, item, scope)

    def _call(self, node: ast.Call, scope: dict[str, object]) -> object:
        func = node.func
        builtin = _BUILTINS.get(func.id) if isinstance(func, ast.Name) else None
        if builtin is None:
            raise CannotEvaluate(self.text(node))
        assert isinstance(func, ast.Name)
        if func.id in scope or func.id in self.names:
            raise CannotEvaluate(f"{self.text(node)} ({func.id} is rebound)")
        unpacked = any(isinstance(a, ast.Starred) for a in node.args)
        if unpacked or any(k.arg is None for k in node.keywords):
            raise CannotEvaluate(f"{self.text(node)} (unpacked arguments)")
        if len({k.arg for k in node.keywords}) != len(node.keywords):
            raise CannotEvaluate(f"{self.text(node)} (repeated keyword)")
        args = [self.calc(a, scope) for a in node.args]
        kwargs = {k.arg: self.calc(k.value, scope) for k in node.keywords if k.arg is not None}
        return builtin(self, node, args, kwargs)


# -- builtins: each receives evaluated arguments and validates them itself --


def _arity(
    ev: Evaluator,
    node: ast.Call,
    args: list[object],
    kwargs: dict[str, object],
    low: int,
    high: int,
    allowed: tuple[str, ...] = (),
) -> None:
    if not low <= len(args) <= high or any(k not in allowed for k in kwargs):
        raise CannotEvaluate(f"{ev.text(node)} (unsupported arguments)")


def _require_ints(ev: Evaluator, node: ast.Call, values: Iterable[object]) -> None:
    if not all(_is_int(v) for v in values):
        raise CannotEvaluate(f"{ev.text(node)} (expects ints)")


def _b_len(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 1)
    value = args[0]
    if type(value) is LayerStack:
        return value.count
    if type(value) not in (list, tuple, set, frozenset, str, range):
        raise CannotEvaluate(f"{ev.text(node)} (len of {_type_name(value)})")
    return len(value)  # type: ignore[arg-type]


def _collect(
    ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]
) -> list[object]:
    _arity(ev, node, args, kwargs, 0, 1)
    if not args:
        return []
    items = list(ev._iterable(args[0], node.args[0]))
    ev._sized(items, node)
    return items


def _b_list(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    return _collect(ev, node, args, kwargs)


def _b_tuple(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    return tuple(_collect(ev, node, args, kwargs))


def _b_set(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    return ev._set(_collect(ev, node, args, kwargs), node)


def _b_sorted(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 1, ("reverse",))
    reverse = kwargs.get("reverse", False)
    _require_ints(ev, node, [reverse])
    items = list(ev._iterable(args[0], node.args[0]))
    try:
        return sorted(items, reverse=bool(reverse))  # type: ignore[type-var]
    except TypeError as exc:
        raise CannotEvaluate(f"{ev.text(node)} ({exc})") from None


def _b_range(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 3)
    _require_ints(ev, node, args)
    if len(args) == 3 and args[2] == 0:
        raise CannotEvaluate(f"{ev.text(node)} (step is zero)")
    result = range(*args)  # type: ignore[call-overload]
    return ev._sized(result, node)


def _extreme(pick: Callable[..., object]) -> _Builtin:
    def run(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
        _arity(ev, node, args, kwargs, 1, MAX_ELEMENTS)
        items = list(ev._iterable(args[0], node.args[0])) if len(args) == 1 else args
        if not items:
            raise CannotEvaluate(f"{ev.text(node)} (empty sequence)")
        if any(type(item) is LayerStack for item in items):
            raise CannotEvaluate(f"{ev.text(node)} (comparison with a layer stack)")
        try:
            return pick(items)
        except TypeError as exc:
            raise CannotEvaluate(f"{ev.text(node)} ({exc})") from None

    return run


def _b_sum(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 2, ("start",))
    if len(args) == 2 and "start" in kwargs:
        raise CannotEvaluate(f"{ev.text(node)} (unsupported arguments)")
    start = args[1] if len(args) == 2 else kwargs.get("start", 0)
    items = list(ev._iterable(args[0], node.args[0]))
    _require_ints(ev, node, [start, *items])
    return ev._int(sum(items, start), node)  # type: ignore[call-overload]


def _b_abs(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 1)
    _require_ints(ev, node, args)
    return abs(args[0])  # type: ignore[arg-type]


def _b_int(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 0, 2)
    if not args:
        return 0
    value = args[0]
    if len(args) == 1 and _is_number(value):
        return int(value)  # type: ignore[call-overload]  # a quotient: truncated, as int(float)
    if type(value) is not str or len(value) > 100 or (len(args) == 2 and not _is_int(args[1])):
        raise CannotEvaluate(f"{ev.text(node)} (unsupported arguments)")
    try:
        result = int(value, *args[1:])
    except ValueError as exc:
        raise CannotEvaluate(f"{ev.text(node)} ({exc})") from None
    return ev._int(result, node)


def _b_round(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    """round(x) of an integer or an exact quotient: half to even, as Python rounds a float."""
    _arity(ev, node, args, kwargs, 1, 1)
    if not _is_number(args[0]):
        raise CannotEvaluate(f"{ev.text(node)} (round of {_type_name(args[0])})")
    return ev._int(round(args[0]), node)  # type: ignore[call-overload]


def _b_reversed(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 1)
    value = args[0]
    if type(value) not in _SEQUENCES:
        raise CannotEvaluate(f"{ev.text(node)} (reversed of {_type_name(value)})")
    return _Iterator(list(reversed(value)))  # type: ignore[call-overload]


def _b_enumerate(ev: Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> _Iterator:
    _arity(ev, node, args, kwargs, 1, 2, ("start",))
    if len(args) == 2 and "start" in kwargs:
        raise CannotEvaluate(f"{ev.text(node)} (unsupported arguments)")
    start = args[1] if len(args) == 2 else kwargs.get("start", 0)
    _require_ints(ev, node, [start])
    items = ev._iterable(args[0], node.args[0])
    return _Iterator([(start + i, item) for i, item in enumerate(items)])  # type: ignore[operator]


_BUILTINS: Final[dict[str, _Builtin]] = {
    "len": _b_len,
    "list": _b_list,
    "tuple": _b_tuple,
    "set": _b_set,
    "sorted": _b_sorted,
    "range": _b_range,
    "min": _extreme(min),
    "max": _extreme(max),
    "sum": _b_sum,
    "abs": _b_abs,
    "int": _b_int,
    "round": _b_round,
    "reversed": _b_reversed,
    "enumerate": _b_enumerate,
}

_HANDLERS: Final[dict[type[ast.AST], Callable[[Evaluator, ast.AST, dict[str, object]], object]]] = {
    ast.UnaryOp: Evaluator._unary,  # type: ignore[dict-item]
    ast.BinOp: Evaluator._binary,  # type: ignore[dict-item]
    ast.BoolOp: Evaluator._boolean,  # type: ignore[dict-item]
    ast.Compare: Evaluator._compare,  # type: ignore[dict-item]
    ast.IfExp: Evaluator._ternary,  # type: ignore[dict-item]
    ast.Subscript: Evaluator._subscript,  # type: ignore[dict-item]
    ast.List: Evaluator._display,  # type: ignore[dict-item]
    ast.Tuple: Evaluator._display,  # type: ignore[dict-item]
    ast.Set: Evaluator._display,  # type: ignore[dict-item]
    ast.ListComp: Evaluator._comprehension,  # type: ignore[dict-item]
    ast.SetComp: Evaluator._comprehension,  # type: ignore[dict-item]
    ast.GeneratorExp: Evaluator._comprehension,  # type: ignore[dict-item]
    ast.Call: Evaluator._call,  # type: ignore[dict-item]
}


def evaluate(expression: str, names: Mapping[str, object]) -> object:
    """Evaluate one expression (source text) over ``names``; raises only CannotEvaluate.

    ``names`` is keyed by ``ast.unparse`` form (see :func:`normalise`). Lists come back as
    lists and tuples as tuples; a bare generator, ``reversed`` or ``enumerate`` result is
    refused rather than materialised.
    """
    node = parse_expression(expression)
    return Evaluator(names).export(node, {})
