"""Which ids would make the engine serve the layout a draft was trained on?

A MISMATCH is only half an answer; the user needs the ids to write into the draft config (or
the code change, when no ids can do it). The transform chain is not invertible in general
(``+1 only if the first id is 1``, delegation, defaults, ids dropped by the loop), so this
module does not invert it: it proposes candidate id lists and runs each through the engine's
real chain with :func:`flowtrace.analysis.trace.trace_row`, keeping only those whose trace
captures exactly the trained boundaries. Every returned suggestion carries the trace that
proved it, re-run once more just before it is returned.

When no candidate works, the answer names the link that blocks: the setter ignores the ids,
the loop never reaches a boundary (embedding, last layer), or index 0 raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice, product

from flowtrace.analysis.resolve import ModelRow, Project
from flowtrace.analysis.trace import TraceResult, describe_boundary, trace_row
from flowtrace.model import facts as F
from flowtrace.model.links import Production

MAX_COMBINATIONS = 64
MAX_SUGGESTIONS = 2
WINDOW = 2  # ids tried around each wanted boundary


@dataclass(frozen=True, slots=True)
class Suggestion:
    """Ids to serve (``ids`` set), or the code change needed (``ids`` None, ``blocked_by`` set)."""

    ids: tuple[int, ...] | None
    key: str | None
    served: tuple[int, ...] | None
    why: str
    blocked_by: str | None = None  # the capture-chain link that blocks: "setter", "capture site", ...
    location: F.Location | None = None  # the blocking code, or the branch the ids take
    config: str = "draft config"  # where ``key`` lives: the draft's config, or the engine's serving config


# The outcomes a trace decides; unknown and refuses say the analysis could not follow.
_DECIDED = (F.Outcome.CAPTURES, F.Outcome.RAISES, F.Outcome.CAPTURES_NOTHING, F.Outcome.CAPTURES_DELTAS)


def outcome(trace: TraceResult) -> str:
    """captures | raises | captures_nothing | captures_deltas: the trace's outcome when it is
    decided, else what it recorded."""
    if trace.outcome in _DECIDED:
        return str(trace.outcome)
    return "captures" if trace.boundaries else "captures_nothing"


def decided(trace: TraceResult) -> bool:
    """Whether the trace reached a definite outcome (not "the analysis could not follow")."""
    return trace.outcome in _DECIDED


def reason(trace: TraceResult) -> str | None:
    value = getattr(trace, "reason", None)
    if isinstance(value, str) and value:
        return value
    return "; ".join(trace.problems) or None


def serves(trace: TraceResult, want: list[int]) -> bool:
    """The trace captures exactly ``want`` (in layer order), nothing dropped, nothing raised."""
    return (
        outcome(trace) == "captures"
        and trace.boundaries is not None
        and sorted(trace.boundaries) == sorted(want)
        and not trace.dropped
        and not trace.problems
    )


def deciding_setter(trace: TraceResult) -> tuple[F.Location | None, str | None]:
    """(location, text) of the last decision step: the setter (or branch) that wrote the
    capture indices; later trace versions may add finer-grained ``branch`` steps."""
    for step in reversed(trace.steps):
        if step.kind in ("branch", "setter") and step.location is not None:
            return step.location, step.text
    return None, None


def _offset_candidates(want: list[int]) -> list[list[int]]:
    out = []
    for delta in (0, -1, 1, -2):
        ids = [b + delta for b in want]
        if all(i >= -1 for i in ids):
            out.append(ids)
    return out


class _Search:
    """One search: memoised traces of one row at one L."""

    def __init__(self, project: Project, row: ModelRow, num_layers: int, hidden: int | None) -> None:
        self.project, self.row, self.L, self.hidden = project, row, num_layers, hidden
        self._memo: dict[tuple[int, ...], TraceResult] = {}

    def trace(self, ids: list[int]) -> TraceResult:
        key = tuple(ids)
        if key not in self._memo:
            self._memo[key] = trace_row(self.project, self.row, list(ids), self.L, self.hidden)
        return self._memo[key]

    def singles(self, want: list[int]) -> dict[int, list[int]]:
        """boundary -> the single ids that alone make the engine capture exactly it.

        Only ids within a small window of each wanted boundary are tried (every transform
        engines use moves an id by at most a layer or two), so the cost does not grow with L."""
        by_boundary: dict[int, list[int]] = {}
        tried = sorted({i for b in want for i in range(b - WINDOW, b + WINDOW + 1) if -1 <= i <= self.L})
        for i in tried:
            t = self.trace([i])
            if outcome(t) == "captures" and t.boundaries and len(t.boundaries) == 1 and not t.dropped:
                by_boundary.setdefault(t.boundaries[0], []).append(i)
        return by_boundary

    def candidates(self, want: list[int], singles: dict[int, list[int]]) -> list[list[int]]:
        seen: set[tuple[int, ...]] = set()
        out: list[list[int]] = []
        per_slot = [singles.get(b, [])[:2] for b in want]
        combos = islice(product(*per_slot), MAX_COMBINATIONS) if all(per_slot) else iter(())
        for ids in [*_offset_candidates(want), *(list(c) for c in combos)]:
            if tuple(ids) not in seen:
                seen.add(tuple(ids))
                out.append(ids)
        return out


def _ids_ignored(search: _Search) -> bool:
    """Every id list gives the same capture: the setter never uses the draft's ids."""
    probes = ([1], [search.L // 2], [search.L - 2], [1, 2, 3])
    results = {tuple(search.trace(p).boundaries or ()) for p in probes}
    return len(results) == 1 and bool(next(iter(results)))


def _why_unreachable(search: _Search, b: int) -> tuple[str, F.Location | None, str]:
    """(why, location, link) for a boundary no single id reaches."""
    L = search.L
    for ids in ([b], [b - 1]) if b > 0 else ([0], [-1]):
        t = search.trace(ids)
        if outcome(t) == "raises":
            return (
                f"asking for {describe_boundary(b, L)} makes the engine raise: {reason(t) or 'see trace'}",
                t.raises_at,
                "stream semantics",
            )
    for ids in ([b], [b - 1]):
        t = search.trace(ids)
        why = dict(t.dropped)  # capture index -> why the site never records it
        for step in t.steps:
            if step.kind == "dropped" and step.location is not None and step.index in why:
                return f"{describe_boundary(b, L)} is never captured: {why[step.index]}", step.location, "capture site"
    return f"no id makes the engine capture {describe_boundary(b, L)}", None, "capture site"


def _engine_writes_ids(search: _Search, want: list[int]) -> Suggestion | None:
    """A setter-less row whose engine writes the ids itself (a config builder, a build
    context): no draft config is read, so the change is at the line that writes them."""
    chain = search.row.chain
    if search.row.capture is not None or chain is None or chain.production.kind is not Production.BUILDER_LAYOUT:
        return None
    stated, read_at = chain.production.decision, chain.source.location
    at = stated.location if stated is not None else None
    where = at or read_at
    served = search.trace(want).boundaries
    retrain = f"; or train the draft on the layout it serves: boundaries {list(served)}" if served else ""
    why = stated.reason if stated is not None else "the engine writes them itself"
    return Suggestion(
        None,
        None,
        None,
        f"the engine never reads the draft's ids: {why}; code change: make that line take the draft's ids{retrain}",
        "id source",
        where,
    )


def _blocked(search: _Search, want: list[int], singles: dict[int, list[int]]) -> Suggestion:
    capture = search.row.capture
    written = _engine_writes_ids(search, want)
    if written is not None:
        return written
    if capture is None and search.row.chain is None:
        return Suggestion(
            None,
            None,
            None,
            f"{search.row.name} has no layer-capture setter: the engine cannot capture auxiliary states for it; code"
            " change: give it a setter and a capture loop",
            "id source",
            search.row.location,
        )
    if capture is not None and _ids_ignored(search):
        setter = capture.chain[-1] if capture.chain else capture.setter
        where: F.Location | None = setter.location
        return Suggestion(
            None,
            None,
            None,
            f"the engine ignores the draft's ids (set by {setter.class_qualname.rsplit('.', 1)[-1]}.{setter.method} at"
            f" {where}); code change: make the setter use layer_ids",
            "transform",
            where,
        )
    deltas = search.trace(want)
    if outcome(deltas) == "captures_deltas":  # no ids give the residual the recording leaves out
        at = next((st.location for st in deltas.steps if st.kind == "stream" and st.location), None)
        return Suggestion(
            None,
            None,
            None,
            f"no ids can: {reason(deltas)}; code change needed at the recording (add the residual the layers return"
            " apart)",
            "stream semantics",
            at,
        )
    if not singles:
        probe = search.trace(want)
        if not decided(probe):
            at = deciding_setter(probe)[0]
            return Suggestion(
                None,
                None,
                None,
                f"flowtrace cannot decide what the engine captures for {search.row.name}:"
                f" {reason(probe) or 'capture path undecidable'}; no ids are suggested (read `flowtrace trace` at that"
                " line)",
                "undecided",
                at,
            )
        where = probe.raises_at or deciding_setter(probe)[0]
        link = "stream semantics" if outcome(probe) == "raises" else "capture chain"
        return Suggestion(
            None,
            None,
            None,
            f"no ids tried make the engine capture anything: {reason(probe) or outcome(probe)}; code change needed (or"
            " the analysis cannot follow this class: see `flowtrace trace`)",
            link,
            where,
        )
    missing = [b for b in want if b not in singles]
    if missing:
        why, where, link = _why_unreachable(search, missing[0])
        more = (
            f" (also unreachable: {', '.join(describe_boundary(b, search.L) for b in missing[1:])})"
            if len(missing) > 1
            else ""
        )
        return Suggestion(None, None, None, f"no ids can: {why}{more}; code change needed at that line", link, where)
    where, _ = deciding_setter(search.trace(want))
    return Suggestion(
        None,
        None,
        None,
        "each trained boundary is reachable alone, but no id list yields them together: the transform is decided on the"
        " whole list; code change needed in the setter",
        "transform",
        where,
    )


def suggest(
    project: Project, row: ModelRow, want: list[int], num_layers: int, hidden: int | None, key: str | None
) -> tuple[Suggestion, ...]:
    """Verified id lists (at most two) that make the engine serve ``want``; else one
    suggestion naming the code change and the link that blocks."""
    search = _Search(project, row, num_layers, hidden)
    chain = row.chain
    if row.capture is None and (chain is None or chain.source.kind != F.SourceKind.SERVING_CONFIG):
        return (_blocked(search, want, {}),)
    if row.capture is None and chain is not None:  # a metadata-hook engine: the ids stand for its serving config key
        key = chain.source.key
    singles = search.singles(sorted(want))
    found: list[Suggestion] = []
    where_key = "serving config" if row.capture is None else "draft config"
    for ids in search.candidates(sorted(want), singles):
        if not serves(search.trace(ids), want):
            continue
        confirmed = trace_row(project, row, list(ids), num_layers, hidden)  # re-traced before it is reported
        if not serves(confirmed, want):
            continue
        where, text = deciding_setter(confirmed)
        why = f"the engine's chain maps ids {ids} to boundaries {list(confirmed.boundaries or ())}" + (
            f" ({text.split('  [')[0]} at {where})" if where and text else ""
        )
        found.append(Suggestion(tuple(ids), key, tuple(confirmed.boundaries or ()), why, None, where, where_key))
        if len(found) >= MAX_SUGGESTIONS:
            break
    return tuple(found) if found else (_blocked(search, want, singles),)


def suggestion_json(s: Suggestion) -> dict[str, object]:
    return {
        "ids": list(s.ids) if s.ids is not None else None,
        "key": s.key,
        "served_boundaries": list(s.served) if s.served is not None else None,
        "why": s.why,
        "blocked_by": s.blocked_by,
        "location": str(s.location) if s.location is not None else None,
        "config": s.config,
    }
