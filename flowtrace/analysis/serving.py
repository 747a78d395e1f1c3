"""The serving path: which ids the model holds when each kind of batch runs (link 8).

The index reads the runner's functions step by step (:mod:`flowtrace.index.runner_steps`). This
module runs those steps from the profile's start-up entries (``[serving] startup``), following
calls across files (a method on ``self`` through the class's bases, a function through the
imports, a class built through its ``__init__``, a unique name otherwise), ``if`` arms as
alternatives, and records on each way through:

* every setter call, with the ids it hands over (none: the model's defaults; the ids the runner
  holds; ids changed first; ids written in the runner), the function it sits in and the phase
  it runs in (start-up, warm-up, graph capture, weight reload);
* every graph capture, with the setter calls made before it: a captured graph replays the ids
  the model held at capture time on every decode and verify batch, whatever is set later.

An ``if`` arm that calls a setter is the arm taken while a draft is served (its test is the
runner's "aux capture on" test), so the paths kept are the ones EAGLE-3 runs. The weight-reload
entries (``[serving] weight_reload``) run after each start-up path.

:func:`serving_plan` is the engine's answer (memoised per project); :func:`phases` turns it into
the calls each phase of one model row serves (prefill runs eagerly with the ids held last;
graph replay with those held at the last capture; a setter that only ever turns per-layer marks
on serves the union of every call).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from flowtrace.analysis.forward_paths import forward_paths
from flowtrace.analysis.last_memo import LastMemo
from flowtrace.model import facts as F
from flowtrace.model.links import CaptureChain, PhaseLink, ServingLink, SetterCall

if TYPE_CHECKING:
    from flowtrace.analysis.class_lookup import ClassLookup

_MAX_DEPTH = 14
_MAX_STATES = 64
STARTUP, WARMUP, GRAPH_CAPTURE, WEIGHT_RELOAD = "start-up", "warm-up", "graph capture", "weight reload"
_Arm = tuple[F.RunnerStep | F.RunnerFork, ...]  # one way through a fork, as the index stores it
_Items = Sequence[F.RunnerStep | F.RunnerFork]  # a function's steps or one arm of a fork
_DistinctKey = tuple[str, tuple[str, ...], tuple[tuple[str, int], ...], int | None]


@dataclass(frozen=True, slots=True)
class GraphCapture:
    """A graph capture and the setter calls made before it on the same way through."""

    step: F.RunnerStep
    function: str
    before: tuple[SetterCall, ...]


@dataclass(frozen=True, slots=True)
class RunnerPath:
    """One way through a start-up (or a start-up then a weight reload)."""

    entry: str
    calls: tuple[SetterCall, ...]
    captures: tuple[GraphCapture, ...]
    reload_from: int | None = None  # for a weight-reload path: how many calls the start-up made before it

    @property
    def hands_draft_ids(self) -> bool:
        return any(not c.default for c in self.calls)

    @property
    def graph_calls(self) -> tuple[SetterCall, ...] | None:
        """The calls made before the last graph capture (None: no graph captured on this way)."""
        return self.captures[-1].before if self.captures else None


@dataclass(frozen=True, slots=True)
class _State:
    calls: tuple[SetterCall, ...] = ()
    captures: tuple[GraphCapture, ...] = ()
    returned: bool = False


@dataclass(frozen=True, slots=True)
class ServingPlan:
    """The engine's serving path: the start-up ways that hand the draft's ids, and the ways a
    weight reload continues them."""

    startup: tuple[RunnerPath, ...]
    reload: tuple[RunnerPath, ...]
    replayed: str  # the batches graph replay serves, in words

    @property
    def known(self) -> bool:
        return bool(self.startup)

    def representative(self) -> RunnerPath | None:
        """The start-up way trace and compat answer for: the one that calls the setter most
        often (the way that runs every part of the runner dealing with the draft's ids: warm-up,
        graph capture, start-up), then the one whose graphs hold ids furthest from the draft's."""
        return min(self.startup, key=_rank) if self.startup else None

    def set_before_capture(self) -> bool:
        """Some start-up way calls the setter before it captures graphs: the runner does set ids
        for its graphs (then a way that captures before any call is one whose graph runner does
        not take part in the capture of aux states, not evidence of a wrong order)."""
        return any(g.before for p in self.startup for g in p.captures)


def _rank(path: RunnerPath) -> tuple[int, int, list[str]]:
    return (-len(path.calls), *_badness(path))


def _badness(path: RunnerPath) -> tuple[int, list[str]]:
    graph = path.graph_calls
    rank = 3 if graph is None else 0 if not graph else 1 if graph[-1].default else 2
    return rank, [str(c.step.location) for c in path.calls]


class _Runner:
    """The runner functions of one project, followed step by step (see the module doc)."""

    def __init__(self, project: ClassLookup) -> None:
        self.project = project
        self.by_qualname: dict[str, F.RunnerFunctionFact] = {}
        self.by_name: dict[str, list[F.RunnerFunctionFact]] = {}
        for ff in project.files:
            for fn in ff.runner_functions:
                self.by_qualname.setdefault(fn.qualname, fn)
                self.by_name.setdefault(fn.name, []).append(fn)
        self._captures_inside: dict[str, bool] = {}

    # -- resolution -----------------------------------------------------------------------
    def method(self, cls: str, name: str) -> F.RunnerFunctionFact | None:
        for q in self.project.mro(cls) or [cls]:
            found = self.by_qualname.get(f"{q}.{name}")
            if found is not None:
                return found
        return None

    def resolve(self, step: F.RunnerStep, fn: F.RunnerFunctionFact) -> F.RunnerFunctionFact | None:
        if step.kind == F.RunnerStepKind.BUILD:
            return self.method(step.name, "__init__")
        if step.target == "self":
            if fn.class_qualname is not None:
                return self.method(fn.class_qualname, step.name)
            return self.by_qualname.get(f"{fn.qualname.rsplit('.', 1)[0]}.{step.name}")
        if step.target:
            return self.by_qualname.get(step.target)
        named = self.by_name.get(step.name, [])
        return named[0] if len(named) == 1 else None

    def captures_inside(self, fn: F.RunnerFunctionFact, seen: frozenset[str] = frozenset()) -> bool:
        """``fn`` (or what it calls) holds a graph-capture step."""
        if fn.qualname in self._captures_inside:
            return self._captures_inside[fn.qualname]
        found = False
        for step in _flat(fn.steps):
            if step.kind == F.RunnerStepKind.CAPTURE:
                found = True
            elif (
                step.kind in (F.RunnerStepKind.CALL, F.RunnerStepKind.BUILD, F.RunnerStepKind.WARMUP)
                and fn.qualname not in seen
            ):
                callee = self.resolve(step, fn)
                found = (
                    callee is not None
                    and callee.qualname not in seen
                    and self.captures_inside(callee, seen | {fn.qualname})
                )
            if found:
                break
        self._captures_inside[fn.qualname] = found
        return found

    # -- running ---------------------------------------------------------------------------
    def run_function(
        self, fn: F.RunnerFunctionFact, states: frozenset[_State], stack: tuple[str, ...], phase: str
    ) -> frozenset[_State]:
        if fn.qualname in stack or len(stack) >= _MAX_DEPTH:
            return states
        out = self.run(
            fn.steps, frozenset(replace(s, returned=False) for s in states), fn, stack + (fn.qualname,), phase
        )
        return frozenset(replace(s, returned=False) for s in out)

    def run(
        self, items: _Items, states: frozenset[_State], fn: F.RunnerFunctionFact, stack: tuple[str, ...], phase: str
    ) -> frozenset[_State]:
        for item in items:
            live = frozenset(s for s in states if not s.returned)
            if not live:
                break
            done = states - live
            if isinstance(item, F.RunnerFork):
                arms = self.draft_arms(item, fn)
                after: set[_State] = set()
                for arm in arms:
                    after |= self.run(arm, live, fn, stack, phase)
                states = _capped(frozenset(after) | done)
            else:
                states = _capped(self.step(item, live, fn, stack, phase) | done)
        return states

    def step(
        self,
        step: F.RunnerStep,
        states: frozenset[_State],
        fn: F.RunnerFunctionFact,
        stack: tuple[str, ...],
        phase: str,
    ) -> frozenset[_State]:
        kind = step.kind
        if kind == F.RunnerStepKind.SETTER:
            call = SetterCall(step, fn.qualname, phase)
            return frozenset(replace(s, calls=s.calls + (call,)) for s in states)
        if kind == F.RunnerStepKind.RETURN:
            return frozenset(replace(s, returned=True) for s in states)
        callee = self.resolve(step, fn)
        inner = phase
        if kind == F.RunnerStepKind.CAPTURE:
            inner = GRAPH_CAPTURE
        elif kind == F.RunnerStepKind.WARMUP and phase == STARTUP:
            inner = WARMUP
        after = self.run_function(callee, states, stack, inner) if callee is not None else states
        if kind == F.RunnerStepKind.CAPTURE and (callee is None or not self.captures_inside(callee)):
            after = frozenset(
                replace(s, captures=s.captures + (GraphCapture(step, fn.qualname, s.calls),)) for s in after
            )
        return after

    def draft_arms(self, fork: F.RunnerFork, fn: F.RunnerFunctionFact) -> list[_Arm]:
        """The arms a draft's start-up takes: an ``if`` arm calling a setter is the runner's "aux
        capture on" branch; of several classes one of which is built (a graph runner per device),
        the ones whose construction calls a setter take part in the aux capture. Else every arm."""
        if all(
            len(a) == 1 and isinstance(a[0], F.RunnerStep) and a[0].kind == F.RunnerStepKind.BUILD for a in fork.arms
        ):
            chosen = [a for a in fork.arms if isinstance(a[0], F.RunnerStep) and self.sets_ids_inside(a[0], fn)]
        else:
            chosen = [a for a in fork.arms if _sets_ids(a)]
        return chosen or list(fork.arms)

    def sets_ids_inside(self, step: F.RunnerStep, fn: F.RunnerFunctionFact, seen: frozenset[str] = frozenset()) -> bool:
        callee = self.resolve(step, fn)
        if callee is None or callee.qualname in seen:
            return False
        for inner in _flat(callee.steps):
            if inner.kind == F.RunnerStepKind.SETTER:
                return True
            if inner.kind in (F.RunnerStepKind.CALL, F.RunnerStepKind.BUILD) and self.sets_ids_inside(
                inner, callee, seen | {callee.qualname}
            ):
                return True
        return False

    def entries(self, names: frozenset[str]) -> list[F.RunnerFunctionFact]:
        return sorted((fn for n in names for fn in self.by_name.get(n, [])), key=lambda f: f.qualname)


def _flat(items: _Items) -> list[F.RunnerStep]:
    out: list[F.RunnerStep] = []
    for item in items:
        if isinstance(item, F.RunnerFork):
            for arm in item.arms:
                out.extend(_flat(arm))
        else:
            out.append(item)
    return out


def _sets_ids(items: _Items) -> bool:
    return any(s.kind == F.RunnerStepKind.SETTER for s in _flat(items))


def _capped(states: frozenset[_State]) -> frozenset[_State]:
    """At most _MAX_STATES ways through, the same ones every run (ordered by their steps)."""
    if len(states) <= _MAX_STATES:
        return states
    key = lambda s: (  # noqa: E731
        [str(c.step.location) for c in s.calls],
        [str(c.step.location) for c in s.captures],
        s.returned,
    )
    return frozenset(sorted(states, key=key)[:_MAX_STATES])


def _paths(entry: F.RunnerFunctionFact, states: frozenset[_State], reload_from: int | None = None) -> list[RunnerPath]:
    return [RunnerPath(entry.qualname, s.calls, s.captures, reload_from) for s in states]


def _distinct(paths: list[RunnerPath]) -> tuple[RunnerPath, ...]:
    seen: dict[_DistinctKey, RunnerPath] = {}
    for p in paths:
        key = (
            p.entry,
            tuple(str(c.step.location) for c in p.calls),
            tuple((str(g.step.location), len(g.before)) for g in p.captures),
            p.reload_from,
        )
        seen.setdefault(key, p)
    return tuple(sorted(seen.values(), key=lambda p: (p.entry, _badness(p))))


def build_plan(project: ClassLookup) -> ServingPlan:
    """The start-up ways that hand the draft's ids, and the weight reloads after them."""
    conv = project.conv
    runner = _Runner(project)
    startup: list[RunnerPath] = []
    for entry in runner.entries(conv.startup):
        states = runner.run_function(entry, frozenset({_State()}), (), STARTUP)
        startup += [p for p in _paths(entry, states) if p.hands_draft_ids]
    found = _distinct(startup)
    reload: list[RunnerPath] = []
    for path in found:
        start = _State(path.calls, path.captures)
        for entry in runner.entries(conv.weight_reload):
            states = runner.run_function(entry, frozenset({start}), (), WEIGHT_RELOAD)
            reload += [
                p
                for p in _paths(entry, states, len(path.calls))
                if len(p.calls) > len(path.calls) or len(p.captures) > len(path.captures)
            ]
    replayed = sorted(conv.replayed_phases)
    return ServingPlan(found, _distinct(reload), replayed[0] if len(replayed) == 1 else "decode and verify batches")


_PLANS: LastMemo[ClassLookup, ServingPlan] = LastMemo()


def serving_plan(project: ClassLookup) -> ServingPlan:
    """:func:`build_plan`, once per project (the rules, trace and compat ask for the same)."""
    return _PLANS.get(project, build_plan)


# -- one row: which calls each phase serves -----------------------------------------------------
def accumulates(project: ClassLookup, chain: CaptureChain | None) -> F.LayerMarkFact | None:
    """The mark a setter of the chain turns on per id and never off, that the forward reads."""
    for link in chain.transforms if chain is not None else ():
        setter = project.setters.get(link.owner, {}).get(link.method)
        for mark in setter.marks if setter is not None else ():
            if not mark.cleared and mark.read_at is not None:
                return mark
    return None


def _held(calls: tuple[SetterCall, ...], union: bool) -> tuple[SetterCall, ...]:
    if not calls:
        return ()
    return calls if union else calls[-1:]


def phases(project: ClassLookup, chain: CaptureChain | None, plan: ServingPlan | None = None) -> tuple[PhaseLink, ...]:
    """The phases of the representative start-up way (prefill, graph replay) and of a weight reload after
    it, for a row's chain; empty when the runner's start-up was not read (no ``[serving] startup``
    reaches a call)."""
    plan = plan or serving_plan(project)
    path = plan.representative()
    if path is None:
        return ()
    union = accumulates(project, chain) is not None
    out = [PhaseLink("prefill", "prefill (eager)", _held(path.calls, union), path.calls[-1].step.location)]
    graph = path.graph_calls
    if graph is not None:
        out.append(
            PhaseLink(
                "graph replay", f"{plan.replayed} (graph replay)", _held(graph, union), path.captures[-1].step.location
            )
        )
    reload = [p for p in plan.reload if p.calls[: p.reload_from or 0] == path.calls]
    if reload:
        after = min(reload, key=_rank)
        out.append(
            PhaseLink(
                "after a weight reload",
                "prefill after a weight reload",
                _held(after.calls, union),
                after.calls[-1].step.location,
            )
        )
    return tuple(out)


def ids_for(call: SetterCall, draft_ids: list[int] | None) -> tuple[bool, list[int] | None]:
    """(known, ids) a call hands the model for a draft with ``draft_ids`` (None: the default)."""
    step = call.step
    if step.ids == F.RunnerIds.DEFAULT:
        return True, None
    if step.ids == F.RunnerIds.GIVEN:
        return True, draft_ids
    if step.ids == F.RunnerIds.TRANSFORMED and step.offset is not None and draft_ids is not None:
        return True, [i + step.offset for i in draft_ids]
    if step.ids == F.RunnerIds.LITERAL:
        try:
            return True, [int(x) for x in step.ids_text.strip("[]() ").replace(" ", "").split(",") if x]
        except ValueError:
            return False, None
    return False, None


def serving_link(project: ClassLookup, chain: CaptureChain) -> ServingLink:
    """Link 8 of a row's chain, completed once its other links are known: the setter calls
    each phase of serving holds and the forward's layer-running paths, for a chain whose ids
    reach a setter (the runner hands the draft's ids to setters). What the chain's assembly
    put there (serving modes, what the setters write against what the forward reads) stays."""
    if not chain.setter_driven:
        return chain.serving
    return ServingLink(chain.serving.modes, phases(project, chain), forward_paths(project, chain), chain.serving.unread)


__all__ = [
    "GraphCapture",
    "RunnerPath",
    "ServingPlan",
    "SetterCall",
    "accumulates",
    "build_plan",
    "ids_for",
    "phases",
    "serving_link",
    "serving_plan",
]
