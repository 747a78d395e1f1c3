"""Interpret small setter functions on concrete inputs without running them.

Engines choose the decoder layers whose hidden states they capture in tiny setters
(``set_eagle3_layers_to_capture``, ``set_aux_hidden_state_layers``, ...). :func:`run_function`
walks such a body statement by statement over the stdlib ``ast`` tree, evaluating each
expression with :mod:`flowtrace.model.safe_eval` (the same refusals, the same ``names``
convention), and records what it observes: attribute writes, delegated calls, branch
decisions, the returned value. A statement outside the subset is recorded in
``unevaluated``, or stops the run where continuing would mean guessing.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from flowtrace.model.safe_eval import (
    IMMUTABLE,
    PURE_METHODS,
    UNBOUND,
    CannotEvaluate,
    Evaluator,
    NodeTexts,
    WouldRaise,
    check_value,
    internal_value,
    parse_source,
    short_repr,
)

__all__ = ["BranchStep", "CallSite", "FunctionRun", "Write", "run_function"]

MAX_LOOP_ITEMS: Final = 1_000  # items a ``for`` statement may run its body for


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
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
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


@dataclass(frozen=True, slots=True)
class _Shared:
    """What every run of one parsed function (see :func:`_parse_function`) may share: the
    evaluator's node texts, and the ``x = x <op> y`` node each ``x <op>= y`` is evaluated as
    (one node per statement, so that its texts are read once and nothing grows per run)."""

    texts: NodeTexts = field(default_factory=NodeTexts)
    augmented: dict[ast.AugAssign, ast.BinOp] = field(default_factory=dict)


def _shared(function: _Function) -> _Shared:
    found = _SHARED.get(id(function))
    if found is None or found[0] is not function:
        found = (function, _Shared())
        if len(_SHARED) >= _PARSED_MAX:
            _SHARED.clear()
        _SHARED[id(function)] = found
    return found[1]


_SHARED: dict[int, tuple[ast.AST, _Shared]] = {}


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
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
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


def _mutation_sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str, tuple[type, ...]]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in PURE_METHODS:
                continue
            root, safe = _root_name(node.func.value), IMMUTABLE
        elif isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
            root, safe = _root_name(node.value), IMMUTABLE
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            root, safe = node.target.id, (*IMMUTABLE, tuple)  # these rebind instead
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
        self.shared = _shared(function)
        self.ev = Evaluator(names, on_choice=self._ternary_choice, node_texts=self.shared.texts)
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
            self.scope.setdefault(name, UNBOUND)
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
        self.scope[name] = UNBOUND

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
                    check_value(value, f"argument {name}")
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
                internal = internal_value(value)
                if internal:
                    self._note(CannotEvaluate(f"{expression} ({internal})"))
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
            self.ev.remember(self.ev.text(target), None if failed or internal_value(value) else (value,))

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
        combined = self.shared.augmented.get(stmt)
        if combined is None:
            combined = ast.copy_location(ast.BinOp(left=target, op=stmt.op, right=stmt.value), stmt)
            self.shared.augmented[stmt] = combined
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
            details.append(f"{self.ev.text(operand)} = {short_repr(shown)}")
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
    tree = parse_source(source, "exec")
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
