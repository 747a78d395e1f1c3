"""Evaluate layer-id expressions and small setter functions without running them.

Engines choose the decoder layers whose hidden states they capture in tiny setters
(``set_eagle3_layers_to_capture``, ``set_aux_hidden_state_layers``, ...). To report which
ids an engine really captures we must evaluate those bodies on concrete inputs, but the
code is untrusted text from a downloaded wheel: nothing here calls ``eval``, ``exec`` or
``compile`` on it. We walk the stdlib ``ast`` tree and interpret a small, side-effect
free subset; anything outside it raises :class:`CannotEvaluate` (or, inside
:func:`run_function`, is recorded in ``unevaluated``) instead of being guessed.

Names: before any expression node is evaluated, ``ast.unparse(node)`` is looked up in the
caller's ``names`` mapping; a hit is the node's value. Keys must therefore be in
``ast.unparse`` form (single quotes, canonical spacing): use :func:`normalise` or
:func:`normalise_names` on hand-written keys. Values must be plain data (int, bool, None,
str, list, tuple, set, frozenset, range, :class:`LayerStack`); anything else is refused.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "BranchStep",
    "CallSite",
    "CannotEvaluate",
    "FunctionRun",
    "LayerStack",
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "MAX_INT",
    "MAX_STEPS",
    "WouldRaise",
    "Write",
    "evaluate",
    "normalise",
    "normalise_names",
    "run_function",
]

MAX_ELEMENTS: Final = 100_000  # longest list/range/str any operation may produce
MAX_INT: Final = 10**12  # largest int magnitude: layer ids are small, huge ints mean a wrong guess
MAX_DEPTH: Final = 100  # deepest AST we walk, so recursion stays far below the interpreter limit
MAX_STEPS: Final = 1_000_000  # node evaluations per call: bounds nested comprehensions
MAX_SOURCE: Final = 1_000_000  # characters of source we agree to parse
MAX_LOOP_ITEMS: Final = 1_000  # items a ``for`` statement may run its body for
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

    def __reduce__(self) -> tuple[type[CannotEvaluate], tuple[str]]:
        # The default would re-prefix the message on unpickling (parse pools pickle these).
        return (type(self), (self.construct,))


class WouldRaise(CannotEvaluate):
    """Python itself would raise here, whatever the unknown parts are (iterating None):
    inside :func:`run_function` this ends the run as ``raised``, not as unevaluated."""

    def __init__(self, construct: str, error: str) -> None:
        super().__init__(f"{construct} ({error})")
        self.error = error
        self.construct = construct

    def __reduce__(self) -> tuple:  # type: ignore[override]
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


@dataclass(frozen=True, slots=True)
class BranchStep:
    """One if/elif/ternary decision: which way it went and the values that decided it."""

    line: int
    condition: str
    taken: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Write:
    """An assignment to an attribute or subscript (``self.model.layers_to_capture = ...``).

    ``value`` is None when the right-hand side could not be evaluated (the message is then
    in ``FunctionRun.unevaluated``); ``expression`` always holds its source.
    """

    target: str
    value: object
    expression: str
    line: int


@dataclass(frozen=True, slots=True)
class CallSite:
    """A call made as a statement (delegation such as ``self.model.set_...(ids)``).

    ``argument_sources`` holds the positional arguments' sources first (parallel to
    ``arguments``), then one ``name=source`` (or ``**source``) per keyword. An argument
    that could not be evaluated is None here and has a message in ``unevaluated``.
    """

    callee: str
    arguments: tuple[object, ...]
    keywords: tuple[tuple[str, object], ...]
    argument_sources: tuple[str, ...]
    line: int


@dataclass(frozen=True, slots=True)
class FunctionRun:
    """What interpreting one function on concrete inputs observed.

    ``stopped_at`` (an addition with a default, so positional construction of the other
    fields still works) is the line where interpretation stopped because continuing would
    mean guessing: an undecidable ``if`` test, a skipped statement that may return or
    raise, or a mutation of a local list. None when the run went to completion.
    """

    writes: tuple[Write, ...]
    calls: tuple[CallSite, ...]
    returned: object
    returned_early: bool
    raised: str | None
    steps: tuple[BranchStep, ...]
    unevaluated: tuple[str, ...]
    stopped_at: int | None = None
    raised_line: int | None = None  # line of the raise (or failing assert), when ``raised``


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
_UNBOUND: Final = _Unbound()
_NONE_TYPE: Final = type(None)
_INTS: Final = (int, bool)
_ITERABLES: Final = (list, tuple, set, frozenset, str, range, _Iterator)
_SEQUENCES: Final = (list, tuple, str, range)
_IMMUTABLE: Final[tuple[type, ...]] = (int, bool, str, _NONE_TYPE, range, frozenset, LayerStack, _Unbound)
# Methods of list/set/str that never change their receiver.
_PURE_METHODS: Final = frozenset(
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
}


def _is_int(value: object) -> bool:
    return type(value) in _INTS


def _type_name(value: object) -> str:
    return "iterator" if isinstance(value, _Iterator) else type(value).__name__


def _short(value: object) -> str:
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


def _parse(source: object, mode: str) -> ast.AST:
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


def _parse_expression(expression: object) -> ast.expr:
    if isinstance(expression, str):
        expression = expression.strip()  # as eval() does; mode="eval" rejects indentation
    tree = _parse(expression, "eval")
    assert isinstance(tree, ast.Expression)
    return tree.body


def normalise(expression: str) -> str:
    """The key :func:`evaluate` looks up for ``expression``: its ``ast.unparse`` form.

    ``normalise('hasattr(self.lm, "f")') == "hasattr(self.lm, 'f')"``. Raises
    CannotEvaluate when ``expression`` does not parse.
    """
    return ast.unparse(_parse_expression(expression))


def normalise_names(names: Mapping[str, object]) -> dict[str, object]:
    """``names`` re-keyed through :func:`normalise`, for hand-written bindings."""
    return {normalise(key): value for key, value in names.items()}


def _check_value(value: object, label: str) -> None:
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


def _contains_iterator(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Iterator):
            return True
        if type(item) in (list, tuple, set, frozenset):
            stack.extend(item)  # type: ignore[arg-type]
    return False


_Comprehension = ast.ListComp | ast.SetComp | ast.GeneratorExp
_Builtin = Callable[["_Evaluator", ast.Call, list[object], dict[str, object]], object]
_ChoiceHook = Callable[[ast.IfExp, bool, dict[str, object]], None]


class _Evaluator:
    """Interprets expression nodes; shared by :func:`evaluate` and :func:`run_function`.

    ``scope`` (locals) is passed explicitly because comprehensions open nested scopes.
    """

    def __init__(self, names: Mapping[str, object], on_choice: _ChoiceHook | None = None) -> None:
        self.names = names
        self.on_choice = on_choice
        self.steps = 0
        self.comprehension_depth = 0
        self._texts: dict[ast.AST, str] = {}
        self._loads: dict[ast.AST, frozenset[str]] = {}
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
        """Evaluate for a caller: internal iterator objects never leave the module."""
        result = self.value(node, scope)
        if _contains_iterator(result):
            raise CannotEvaluate(f"{self.text(node)} (iterator value)")
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
        # Unbound locals (held as _UNBOUND) block the lookup as well as bound ones.
        return not scope or scope.keys().isdisjoint(self._loaded_names(node))

    def lookup(self, key: str) -> object:
        """``names[key]`` after a one-time type check, or _MISSING."""
        cached = self._bound.get(key, _MISSING)
        if cached is not _MISSING:
            return cached
        found = self.names.get(key, _MISSING) if key not in self._forgotten else _MISSING
        if found is _MISSING:
            return _MISSING
        _check_value(found, key)
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
                if found is _UNBOUND:
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
        if not _is_int(operand):
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
                return left < right  # type: ignore[operator]
            if kind is ast.LtE:
                return left <= right  # type: ignore[operator]
            if kind is ast.Gt:
                return left > right  # type: ignore[operator]
            if kind is ast.GtE:
                return left >= right  # type: ignore[operator]
            container = self._iterable(right, node)
            found = left in container  # type: ignore[operator]
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
            return self._layer(node, container, scope)  # type: ignore[arg-type]
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
            return sequence[position]  # type: ignore[index, call-overload]
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
                _check_value(value[0], key)
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
                    inner[target.id] = _UNBOUND
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
    ev: _Evaluator,
    node: ast.Call,
    args: list[object],
    kwargs: dict[str, object],
    low: int,
    high: int,
    allowed: tuple[str, ...] = (),
) -> None:
    if not low <= len(args) <= high or any(k not in allowed for k in kwargs):
        raise CannotEvaluate(f"{ev.text(node)} (unsupported arguments)")


def _require_ints(ev: _Evaluator, node: ast.Call, values: Iterable[object]) -> None:
    if not all(_is_int(v) for v in values):
        raise CannotEvaluate(f"{ev.text(node)} (expects ints)")


def _b_len(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 1)
    value = args[0]
    if type(value) is LayerStack:
        return value.count  # type: ignore[attr-defined]
    if type(value) not in (list, tuple, set, frozenset, str, range):
        raise CannotEvaluate(f"{ev.text(node)} (len of {_type_name(value)})")
    return len(value)  # type: ignore[arg-type]


def _collect(
    ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]
) -> list[object]:
    _arity(ev, node, args, kwargs, 0, 1)
    if not args:
        return []
    items = list(ev._iterable(args[0], node.args[0]))
    ev._sized(items, node)
    return items


def _b_list(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    return _collect(ev, node, args, kwargs)


def _b_tuple(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    return tuple(_collect(ev, node, args, kwargs))


def _b_set(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    return ev._set(_collect(ev, node, args, kwargs), node)


def _b_sorted(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 1, ("reverse",))
    reverse = kwargs.get("reverse", False)
    _require_ints(ev, node, [reverse])
    items = list(ev._iterable(args[0], node.args[0]))
    try:
        return sorted(items, reverse=bool(reverse))  # type: ignore[type-var]
    except TypeError as exc:
        raise CannotEvaluate(f"{ev.text(node)} ({exc})") from None


def _b_range(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 3)
    _require_ints(ev, node, args)
    if len(args) == 3 and args[2] == 0:
        raise CannotEvaluate(f"{ev.text(node)} (step is zero)")
    result = range(*args)  # type: ignore[arg-type, call-overload]
    return ev._sized(result, node)


def _extreme(pick: Callable[..., object]) -> _Builtin:
    def run(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
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


def _b_sum(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 2, ("start",))
    if len(args) == 2 and "start" in kwargs:
        raise CannotEvaluate(f"{ev.text(node)} (unsupported arguments)")
    start = args[1] if len(args) == 2 else kwargs.get("start", 0)
    items = list(ev._iterable(args[0], node.args[0]))
    _require_ints(ev, node, [start, *items])
    return ev._int(sum(items, start), node)  # type: ignore[arg-type, call-overload]


def _b_abs(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 1)
    _require_ints(ev, node, args)
    return abs(args[0])  # type: ignore[arg-type]


def _b_int(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 0, 2)
    if not args:
        return 0
    value = args[0]
    if len(args) == 1 and _is_int(value):
        return int(value)  # type: ignore[arg-type, call-overload]
    if type(value) is not str or len(value) > 100 or (len(args) == 2 and not _is_int(args[1])):
        raise CannotEvaluate(f"{ev.text(node)} (unsupported arguments)")
    try:
        result = int(value, *args[1:])  # type: ignore[call-overload]
    except ValueError as exc:
        raise CannotEvaluate(f"{ev.text(node)} ({exc})") from None
    return ev._int(result, node)


def _b_reversed(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> object:
    _arity(ev, node, args, kwargs, 1, 1)
    value = args[0]
    if type(value) not in _SEQUENCES:
        raise CannotEvaluate(f"{ev.text(node)} (reversed of {_type_name(value)})")
    return _Iterator(list(reversed(value)))  # type: ignore[call-overload]


def _b_enumerate(ev: _Evaluator, node: ast.Call, args: list[object], kwargs: dict[str, object]) -> _Iterator:
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
    "reversed": _b_reversed,
    "enumerate": _b_enumerate,
}

_HANDLERS: Final[dict[type[ast.AST], Callable[[_Evaluator, ast.AST, dict[str, object]], object]]] = {
    ast.UnaryOp: _Evaluator._unary,  # type: ignore[dict-item]
    ast.BinOp: _Evaluator._binary,  # type: ignore[dict-item]
    ast.BoolOp: _Evaluator._boolean,  # type: ignore[dict-item]
    ast.Compare: _Evaluator._compare,  # type: ignore[dict-item]
    ast.IfExp: _Evaluator._ternary,  # type: ignore[dict-item]
    ast.Subscript: _Evaluator._subscript,  # type: ignore[dict-item]
    ast.List: _Evaluator._display,  # type: ignore[dict-item]
    ast.Tuple: _Evaluator._display,  # type: ignore[dict-item]
    ast.Set: _Evaluator._display,  # type: ignore[dict-item]
    ast.ListComp: _Evaluator._comprehension,  # type: ignore[dict-item]
    ast.SetComp: _Evaluator._comprehension,  # type: ignore[dict-item]
    ast.GeneratorExp: _Evaluator._comprehension,  # type: ignore[dict-item]
    ast.Call: _Evaluator._call,  # type: ignore[dict-item]
}


def evaluate(expression: str, names: Mapping[str, object]) -> object:
    """Evaluate one expression (source text) over ``names``; raises only CannotEvaluate.

    ``names`` is keyed by ``ast.unparse`` form (see :func:`normalise`). Lists come back as
    lists and tuples as tuples; a bare generator, ``reversed`` or ``enumerate`` result is
    refused rather than materialised.
    """
    node = _parse_expression(expression)
    return _Evaluator(names).export(node, {})


# -- run_function --


class _Stop(Exception):
    """Unwinds the statement walk on return, raise, or a point past which we would guess."""


_SKIPPED_KINDS: Final[dict[type[ast.AST], str]] = {
    ast.For: "for",
    ast.AsyncFor: "async for",
    ast.While: "while",
    ast.With: "with",
    ast.AsyncWith: "async with",
    ast.Try: "try",
    ast.FunctionDef: "def",
    ast.AsyncFunctionDef: "async def",
    ast.ClassDef: "class",
    ast.Import: "import",
    ast.ImportFrom: "import",
}
for _name, _kind in (("Match", "match"), ("TryStar", "try")):
    if hasattr(ast, _name):
        _SKIPPED_KINDS[getattr(ast, _name)] = _kind


def _names_bound_by(stmt: ast.stmt) -> set[str]:
    """Every name a statement might bind (an over-approximation, which is the safe side)."""
    bound: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif type(node).__name__ in ("MatchAs", "MatchStar") and getattr(node, "name", None):
            bound.add(node.name)  # type: ignore[attr-defined]
        elif type(node).__name__ == "MatchMapping" and getattr(node, "rest", None):
            bound.add(node.rest)  # type: ignore[attr-defined]
    return bound


def _function_locals(function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """Names the body binds, by Python's scoping rules (comprehension targets stay inside);
    once per parsed function (see :func:`_parse_function`)."""
    found = _LOCALS.get(id(function))
    if found is None or found[0] is not function:
        found = (function, _function_locals_uncached(function))
        if len(_LOCALS) >= _PARSED_MAX:
            _LOCALS.clear()
        _LOCALS[id(function)] = found
    return found[1]


_LOCALS: dict[int, tuple[ast.AST, frozenset[str]]] = {}


def _function_locals_uncached(function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    bound: set[str] = set()
    declared: set[str] = set()
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.NamedExpr):
            bound.add(node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            stack.extend(node.decorator_list)
            continue
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif type(node).__name__ in ("MatchAs", "MatchStar") and getattr(node, "name", None):
            bound.add(node.name)  # type: ignore[attr-defined]
        elif type(node).__name__ == "MatchMapping" and getattr(node, "rest", None):
            bound.add(node.rest)  # type: ignore[attr-defined]
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)):
            # Only walrus targets escape these scopes.
            stack.extend(n for n in ast.walk(node) if isinstance(n, ast.NamedExpr))
            continue
        stack.extend(ast.iter_child_nodes(node))
    return frozenset(bound - declared)


def _may_leave(stmt: ast.stmt) -> bool:
    """Whether a skipped statement could return or raise (nested defs do not count)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    stack = list(ast.iter_child_nodes(stmt))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Return, ast.Raise)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


_MUTATIONS = "_flowtrace_mutations"  # the memo's attribute on a node of a parsed function


def _mutations(tree: ast.AST) -> tuple[tuple[ast.AST, str, tuple[type, ...]], ...]:
    """(node, local name, types it may hold unchanged) for each place under ``tree``, in
    ``ast.walk`` order, that would change a local in place: a non-pure method call on it, a
    store into a subscript of it, an augmented assignment to it. The same parsed function
    is interpreted once per row that runs it, so the walk is kept on the node."""
    found = getattr(tree, _MUTATIONS, None)
    if found is None:
        found = tuple(_mutation_sites(tree))
        setattr(tree, _MUTATIONS, found)
    return found


def _mutation_sites(tree: ast.AST):  # noqa: ANN202
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _PURE_METHODS:
                continue
            root, safe = _root_name(node.func.value), _IMMUTABLE
        elif isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
            root, safe = _root_name(node.value), _IMMUTABLE
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            root, safe = node.target.id, (*_IMMUTABLE, tuple)  # these rebind instead
        else:
            continue
        if root is not None:
            yield node, root, safe


_Function = ast.FunctionDef | ast.AsyncFunctionDef
_SCANNED = (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Assert, ast.Delete)


class _Interpreter:
    """Walks one function body statement by statement, recording what it observes."""

    def __init__(self, function: _Function, names: Mapping[str, object]) -> None:
        self.function = function
        self.ev = _Evaluator(names, on_choice=self._ternary_choice)
        self.scope: dict[str, object] = {}
        self.writes: list[Write] = []
        self.calls: list[CallSite] = []
        self.steps: list[BranchStep] = []
        self.unevaluated: list[str] = []
        self.returned: object = None
        self.returned_early = False
        self.raised: str | None = None
        self.stopped_at: int | None = None
        self.raised_line: int | None = None
        self.current_line: int | None = None
        self.top_index = 0
        self.explaining = False

    def run(self, arguments: Mapping[str, object]) -> FunctionRun:
        self._bind_parameters(arguments)  # defaults see the enclosing scope: bind them first
        spec = self.function.args
        every = (*spec.posonlyargs, *spec.args, *spec.kwonlyargs, spec.vararg, spec.kwarg)
        # Python makes every name the body assigns local to the whole body: before its first
        # binding it must fail, not fall back to ``names``. Unbound parameters stay absent,
        # so callers can still describe ``self.x`` through ``names``.
        for name in _function_locals(self.function) - {a.arg for a in every if a is not None}:
            self.scope.setdefault(name, _UNBOUND)
        body = self.function.body
        try:
            for self.top_index, stmt in enumerate(body):
                self._exec(stmt)
        except _Stop:
            pass
        return FunctionRun(
            writes=tuple(self.writes),
            calls=tuple(self.calls),
            returned=self.returned,
            returned_early=self.returned_early,
            raised=self.raised,
            steps=tuple(self.steps),
            unevaluated=tuple(self.unevaluated),
            stopped_at=self.stopped_at,
            raised_line=self.raised_line,
        )

    def _unbind(self, name: str) -> None:
        self.scope[name] = _UNBOUND

    def _note(self, exc: CannotEvaluate) -> None:
        self.unevaluated.append(str(exc))
        if isinstance(exc, WouldRaise) and self.current_line is not None and self.raised is None:
            self.raised, self.raised_line = f"{exc.error} ({exc.construct})", self.current_line
            raise _Stop

    def _stop(self, line: int) -> None:
        self.stopped_at = line
        raise _Stop

    def _bind_parameters(self, arguments: Mapping[str, object]) -> None:
        spec = self.function.args
        positional = [*spec.posonlyargs, *spec.args]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(spec.defaults))
        defaults += spec.defaults
        params: list[tuple[ast.arg, ast.expr | None]] = list(zip(positional, defaults))
        params += zip(spec.kwonlyargs, spec.kw_defaults)
        params += [(extra, None) for extra in (spec.vararg, spec.kwarg) if extra is not None]
        known = {param.arg for param, _ in params}
        for param, default in params:
            name = param.arg
            if name in arguments:
                value = arguments[name]
                try:
                    _check_value(value, f"argument {name}")
                except CannotEvaluate as exc:
                    self._note(exc)
                else:
                    self.scope[name] = value
            elif default is not None:
                try:
                    self.scope[name] = self.ev.value(default, {})
                except CannotEvaluate as exc:
                    self._note(exc)
        for name in arguments:
            if name not in known:
                self._note(CannotEvaluate(f"argument {name} (no such parameter)"))

    # -- statements --

    def _exec(self, stmt: ast.stmt) -> None:
        self.current_line = stmt.lineno
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            self._call(stmt.value)  # recorded even when it then turns out to mutate a local
            self._check_mutation(stmt)
            return
        self._check_before(stmt)
        if isinstance(stmt, ast.Expr):
            self._expression_statement(stmt.value)
        elif isinstance(stmt, ast.Assign):
            self._assign_all(stmt.targets, stmt.value)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self._assign_all([stmt.target], stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            self._augmented(stmt)
        elif isinstance(stmt, ast.If):
            self._if(stmt)
        elif isinstance(stmt, ast.Return):
            self._return(stmt)
        elif isinstance(stmt, ast.Raise):
            self.raised = self.ev.text(stmt.exc) if stmt.exc is not None else "raise"
            self.raised_line = stmt.lineno
            raise _Stop
        elif isinstance(stmt, ast.Assert):
            self._assert(stmt)
        elif isinstance(stmt, (ast.Pass, ast.Global, ast.Nonlocal)):
            pass
        elif isinstance(stmt, ast.Delete):
            self._delete(stmt)
        elif isinstance(stmt, ast.For):
            self._for(stmt)
        else:
            self._skip(stmt)

    def _check_before(self, stmt: ast.stmt) -> None:
        """Mutation checks before a statement runs: an ``if``'s test, or the whole statement
        for the kinds whose every expression is evaluated."""
        if isinstance(stmt, ast.If):
            self._check_mutation(stmt.test, stmt.lineno)
        elif isinstance(stmt, _SCANNED):
            self._check_mutation(stmt)

    def _if(self, stmt: ast.If) -> None:
        """Decide the test (recorded as a branch step) and run the branch taken."""
        taken = self._decide(stmt.test, stmt.lineno)
        for inner in stmt.body if taken else stmt.orelse:
            self._exec(inner)

    def _skip(self, stmt: ast.stmt) -> None:
        kind = _SKIPPED_KINDS.get(type(stmt), type(stmt).__name__.lower())
        self._note(CannotEvaluate(f"{kind} statement"))
        for name in _names_bound_by(stmt):
            self._unbind(name)
        if _may_leave(stmt) or isinstance(stmt, (ast.Break, ast.Continue)):
            self._stop(stmt.lineno)
        self._check_mutation(stmt)

    def _decide(self, test: ast.expr, line: int) -> bool:
        try:
            taken = self.ev.truth(self.ev.value(test, self.scope), test)
        except CannotEvaluate as exc:
            self._note(exc)
            self._stop(line)
        self.steps.append(BranchStep(line, self.ev.text(test), taken, self._reason(test, self.scope)))
        return taken

    def _ternary_choice(self, node: ast.IfExp, taken: bool, scope: dict[str, object]) -> None:
        if not self.explaining:
            reason = self._reason(node.test, scope)
            self.steps.append(BranchStep(node.lineno, self.ev.text(node.test), taken, reason))

    def _return(self, stmt: ast.Return) -> None:
        if stmt.value is not None:
            try:
                self.returned = self.ev.export(stmt.value, self.scope)
            except CannotEvaluate as exc:
                self._note(exc)
        self.returned_early = self.top_index < len(self.function.body) - 1
        raise _Stop

    def _assert(self, stmt: ast.Assert) -> None:
        try:
            holds = self.ev.truth(self.ev.value(stmt.test, self.scope), stmt.test)
        except CannotEvaluate as exc:
            self._note(exc)  # keep going, but a complete-looking run must not hide it
            return
        if not holds:
            message = f"({self.ev.text(stmt.msg)})" if stmt.msg is not None else ""
            self.raised = f"AssertionError{message}"
            self.raised_line = stmt.lineno
            raise _Stop

    def _delete(self, stmt: ast.Delete) -> None:
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                self._unbind(target.id)
            else:
                self._note(CannotEvaluate(f"del {self.ev.text(target)}"))

    def _check_mutation(self, tree: ast.AST, line: int | None = None) -> None:
        """Stop where Python would change a local list or set in place.

        We never mutate values (they may be the caller's), so after ``ids.append(3)``,
        ``ids[0] = 1`` or ``ids += [2]`` every alias of ``ids`` (other locals, recorded
        writes) would be stale; continuing would be a guess. Callees are assumed not to
        mutate their arguments.
        """
        for node, root, safe in _mutations(tree):
            if type(self.scope.get(root)) not in safe:
                self._note(CannotEvaluate(f"{self.ev.text(node)} (in-place change of local {root})"))
                self._stop(line if line is not None else getattr(node, "lineno", 0))

    def _expression_statement(self, value: ast.expr) -> None:
        if isinstance(value, ast.Call):
            self._call(value)
            self._check_mutation(value)
        elif isinstance(value, ast.IfExp):
            if self._decide(value.test, value.lineno):
                self._expression_statement(value.body)
            else:
                self._expression_statement(value.orelse)
        elif isinstance(value, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)) or any(
            isinstance(node, ast.Call) for node in ast.walk(value)
        ):
            self._note(CannotEvaluate(self.ev.text(value)))
            if isinstance(value, ast.NamedExpr):
                self._unbind(value.target.id)

    def _call(self, call: ast.Call) -> None:
        arguments: list[object] = []
        sources: list[str] = []
        for argument in call.args:
            sources.append(self.ev.text(argument))
            arguments.append(self._argument(argument))
        keywords: list[tuple[str, object]] = []
        for keyword in call.keywords:
            source = self.ev.text(keyword.value)
            sources.append(f"{keyword.arg}={source}" if keyword.arg is not None else f"**{source}")
            keywords.append((keyword.arg or "**", self._argument(keyword.value, keyword.arg is None)))
        callee = self.ev.text(call.func)
        site = CallSite(callee, tuple(arguments), tuple(keywords), tuple(sources), call.lineno)
        self.calls.append(site)

    def _argument(self, node: ast.expr, unpacked: bool = False) -> object:
        if unpacked or isinstance(node, ast.Starred):
            self._note(CannotEvaluate(f"{'**' if unpacked else ''}{self.ev.text(node)}"))
            return None
        try:
            return self.ev.export(node, self.scope)
        except CannotEvaluate as exc:
            self._note(exc)
            return None

    def _assign_all(self, targets: list[ast.expr], value_node: ast.expr) -> None:
        try:
            value: object = self.ev.value(value_node, self.scope)
        except CannotEvaluate as exc:
            self._note(exc)
            value = exc
        for target in targets:
            self._assign(target, value, self.ev.text(value_node), value_node.lineno)

    def _assign(self, target: ast.expr, value: object, expression: str, line: int) -> None:
        """Bind or record one target; ``value`` is a CannotEvaluate when it failed."""
        failed = isinstance(value, CannotEvaluate)
        if isinstance(target, ast.Name):
            if failed:
                self._unbind(target.id)
            else:
                self.scope[target.id] = value
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            recorded = None
            if not failed:
                if _contains_iterator(value):
                    self._note(CannotEvaluate(f"{expression} (iterator value)"))
                else:
                    recorded = value
            self.writes.append(Write(self.ev.text(target), recorded, expression, line))
            if isinstance(target, ast.Attribute):
                self._remember(target, value, failed)
        elif isinstance(target, (ast.Tuple, ast.List)):
            parts: list[object] = [value] * len(target.elts)
            if not failed:
                try:
                    items = list(self.ev._iterable(value, target))
                    starred = any(isinstance(e, ast.Starred) for e in target.elts)
                    if starred or len(items) != len(target.elts):
                        raise CannotEvaluate(f"{self.ev.text(target)} = {expression} (cannot unpack)")
                    parts = items
                except CannotEvaluate as exc:
                    self._note(exc)
                    parts = [exc] * len(target.elts)
            for element, part in zip(target.elts, parts):
                self._assign(element, part, expression, line)
        else:  # Starred outside a tuple cannot reach here from valid source; be safe anyway
            for name in _names_bound_by(ast.Expr(target)):
                self._unbind(name)
            self._note(CannotEvaluate(self.ev.text(target)))

    def _remember(self, target: ast.Attribute, value: object, failed: bool) -> None:
        """Later reads of a written ``self.<a>.<b>`` see the value written (nothing, after a
        write we could not evaluate); other targets are left alone."""
        node: ast.expr = target
        while isinstance(node, ast.Attribute):
            node = node.value
        if isinstance(node, ast.Name) and node.id == "self":
            self.ev.remember(self.ev.text(target), None if failed or _contains_iterator(value) else (value,))

    def _for(self, stmt: ast.For) -> None:
        """A ``for`` over a concrete sequence runs its body once per item (setters that flag
        each chosen layer: ``for i in ids: setattr(self.layers[i], ...)``). Anything else —
        an unknown iterable, ``break``/``continue``/``else``, too many items — is skipped."""
        plain = not stmt.orelse and not any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(stmt))
        items: list[object] | None = None
        if plain:
            try:
                value = self.ev.value(stmt.iter, self.scope)
                items = list(self.ev._iterable(value, stmt.iter))
            except WouldRaise as exc:
                self._note(exc)
            except CannotEvaluate:
                items = None
        if items is None or len(items) > MAX_LOOP_ITEMS:
            self._skip(stmt)
            return
        for item in items:
            self._assign(stmt.target, item, self.ev.text(stmt.iter), stmt.lineno)
            for inner in stmt.body:
                self._exec(inner)

    def _augmented(self, stmt: ast.AugAssign) -> None:
        target = stmt.target
        combined = ast.copy_location(ast.BinOp(left=target, op=stmt.op, right=stmt.value), stmt)
        expression = self.ev.text(combined)
        try:
            value: object = self.ev.value(combined, self.scope)
        except CannotEvaluate as exc:
            self._note(exc)
            value = exc
        self._assign(target, value, expression, stmt.lineno)

    # -- explaining decisions --

    def _reason(self, test: ast.expr, scope: dict[str, object]) -> str:
        """``"<deciding part> is <verdict> (<operand> = <value>, ...)"`` for a decided test."""
        self.explaining = True
        try:
            node = self._deciding(test, scope)
            while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                node = node.operand  # "x is False", never "not x is True"
            value = self.ev.value(node, scope)
            truth = self.ev.truth(value, node)
            verdict = str(truth) if type(value) is bool else ("truthy" if truth else "falsy")
            details = self._details(node, value, scope)
            suffix = f" ({', '.join(details)})" if details else ""
            return f"{self.ev.text(node)} is {verdict}{suffix}"
        except CannotEvaluate:  # cannot happen for a test that evaluated; stay total anyway
            return f"{self.ev.text(test)} was decided"
        finally:
            self.explaining = False

    def _deciding(self, node: ast.expr, scope: dict[str, object]) -> ast.expr:
        """The operand of an and/or chain whose value became the test's value."""
        while isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)
            chosen = node.values[-1]
            for operand in node.values:
                if self.ev.truth(self.ev.value(operand, scope), operand) != is_and:
                    chosen = operand
                    break
            node = chosen
        return node

    def _details(self, node: ast.expr, value: object, scope: dict[str, object]) -> list[str]:
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            implied = len(node.ops) == 1 and value is True and isinstance(node.ops[0], (ast.Is, ast.Eq))
            if implied and any(isinstance(o, ast.Constant) for o in operands):
                return []  # "x is None is True" already says what x is
        elif isinstance(node, ast.UnaryOp):
            operands = [node.operand]
        elif isinstance(node, ast.BinOp):
            operands = [node.left, node.right]
        elif isinstance(node, ast.Call):
            operands = list(node.args)
        elif type(value) is not bool:
            operands = [node]
        else:
            operands = []
        details = []
        for operand in operands:
            if isinstance(operand, ast.Constant):
                continue
            try:
                shown = self.ev.value(operand, scope)
            except CannotEvaluate:
                continue
            details.append(f"{self.ev.text(operand)} = {_short(shown)}")
        return details


def _parse_function(source: object) -> _Function:
    """The function ``source`` defines, parsed once per text: every row whose chain runs the
    same setter (a base class's, inherited by dozens of models) interprets the same source,
    and the interpreter only reads the tree."""
    if isinstance(source, str):
        found = _PARSED.get(source)
        if found is None:
            found = _parse_function_uncached(source)
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[source] = found
        return found
    return _parse_function_uncached(source)


_PARSED: dict[str, _Function] = {}
_PARSED_MAX = 1024


def _parse_function_uncached(source: object) -> _Function:
    if isinstance(source, str):
        source = textwrap.dedent(source)
    tree = _parse(source, "exec")
    assert isinstance(tree, ast.Module)
    body = tree.body
    if len(body) != 1 or not isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise CannotEvaluate("source is not a single function definition")
    return body[0]


def run_function(
    source: str, arguments: Mapping[str, object], names: Mapping[str, object]
) -> FunctionRun:
    """Interpret the function ``source`` (a full ``def``, possibly indented) on ``arguments``.

    Parameters are bound by name from ``arguments`` (plain values only); missing ones take
    their default when it is evaluable, else stay unbound so uses fail cleanly. ``names``
    works as in :func:`evaluate`; locals win over it for plain names. Raises CannotEvaluate
    only when ``source`` is not one parseable function; everything else is recorded.
    """
    function = _parse_function(source)
    return _Interpreter(function, names).run(arguments)
