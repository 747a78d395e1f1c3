"""FT007 inconsistent-id-transform: a setter maps draft ids to capture indices differently from most of the engine's
setters."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.boundaries import offset
from flowtrace.checks.draft_outcomes import grade, outcomes
from flowtrace.checks.setter_groups import served_rows
from flowtrace.checks.targets import conventions
from flowtrace.model.consequence import Consequence
from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module, setter
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult


def _own_setters(result: ScanResult) -> list[F.SetterFact]:
    """Setters that assign capture indices themselves (not pure delegation, not the engine's interface)."""
    providers = result.project.conv.interfaces | result.project.conv.holders
    # A setter reached only through another setter receives already-mapped indices.
    chains = [(row, row.chain) for row in result.rows if row.capture is not None and row.chain is not None]
    inner = {(t.owner, t.method) for _, chain in chains for t in chain.transforms[1:]}
    inner -= {(chain.transforms[0].owner, chain.transforms[0].method) for row, chain in chains if row.registered}
    out = []
    for ff in result.files:
        for s in ff.setters:
            if s.class_qualname.rsplit(".", 1)[-1] in providers or s.id_transform == F.DELEGATES or s.parameter is None:
                continue
            if (s.class_qualname, s.method) in inner or not any(b.transform != "default" for b in s.branches):
                continue
            out.append(s)
    return out


class InconsistentIdTransform(Rule):
    code = "FT007"
    name = "inconsistent-id-transform"
    consequence = Consequence.FRAGILE
    summary = "A setter maps draft ids to capture indices differently from most of the engine's setters."
    rationale = (
        "One draft config is served by every model class of an engine. When most setters add one to "
        "explicit ids and a few use identity or a heuristic, the same draft is shifted by a layer on "
        "those classes and acceptance collapses without any error."
    )
    kind = ProblemKind.TRANSFORM_INCONSISTENT
    other_consequences = (Consequence.SILENT_WRONG, Consequence.CRASH_SERVING, Consequence.CRASH_STARTUP)
    fix = "Use the engine's majority convention (named in the message), or document why this class differs."
    valid = (
        Example(
            module(CAPTURING_MODEL, causal_lm()), "plus one, like the engine's other setters"
        ),
    )
    invalid = (
        Example(
            module(CAPTURING_MODEL, causal_lm(setter("list(layer_ids)"))),
            "identity where the engine's other setters add one; the class has no published draft in the catalogue and"
            " the trainers' default layouts (no ids) are served right: fragile",
            line=35,
            kind=ProblemKind.TRANSFORM_INCONSISTENT,
            message="ExForCausalLM.set_eagle3_layers_to_capture uses identity",
            consequence=Consequence.FRAGILE,
            severity="warning",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        setters = _own_setters(result)
        if len(setters) < 3:
            return
        counts = Counter(s.id_transform for s in setters)
        majority, n = counts.most_common(1)[0]
        if n * 2 <= len(setters):
            return
        served = served_rows(result)
        # Where no id names the embedding (a method whose ids are layers 0..L-1), a setter's ids
        # are served alike when they become the same boundaries; where one does, the embedding's
        # id is only recorded by a site before layer 0, so the spelling itself decides.
        method = result.project.conv.method
        by_boundary = method is not None and method.none_embedding
        usual = _majority_shift([s for s in setters if s.id_transform == majority], served) if by_boundary else None
        for s in setters:
            if s.id_transform != majority:
                shift = _shift(s, served.get(s.location, [])) if by_boundary else None
                if shift is not None and shift == usual:
                    continue  # spelled otherwise, but its site turns the ids into the same boundaries
                note = f" ({s.transform_note})" if s.transform_note else ""
                where = ""
                if shift is not None and usual is not None:
                    where = f" (id i is boundary {_plus(shift)} here, {_plus(usual)} on theirs)"
                consequence, effect = _consequence(result, served.get(s.location, []))
                yield self.finding(
                    s.location,
                    f"{s.class_qualname.rsplit('.', 1)[-1]}.{s.method} uses {s.id_transform}{note}; "
                    f"{n} of {len(setters)} setters in this engine use {majority}{where}",
                    f"{s.class_qualname}.{s.method}",
                    f"{s.id_transform}:{s.transform_note}",
                    consequence=consequence,
                    effect=effect,
                )


_ADDS = {F.IDENTITY: 0, F.DELEGATES: 0, F.PLUS_ONE: 1}


def _shift(setter: F.SetterFact, rows: list[ModelRow]) -> int | None:
    """k when every target the setter serves records a draft's id i as boundary i + k: what its
    chain's setters add plus the site's point (a layer's output is one more); None when a row's
    chain or point does not say, or the rows disagree. A setter that only ever receives ids
    another one mapped is judged by what the draft's ids become, not by its own spelling."""
    shifts = set()
    for row in rows:
        chain = row.chain
        if chain is None or chain.site is None:
            return None
        if not any(link.location == setter.location for link in chain.transforms):
            return None
        adds = [_ADDS.get(link.transform) for link in chain.transforms]
        if None in adds or chain.site.point not in (F.Point.INPUT, F.Point.OUTPUT):
            return None
        shifts.add(sum(adds) + offset(chain.site.point))  # type: ignore[arg-type]
    return shifts.pop() if len(shifts) == 1 else None


def _majority_shift(setters: list[F.SetterFact], served: dict[F.Location, list[ModelRow]]) -> int | None:
    """The boundary shift the majority's setters give, when those that say agree."""
    shifts = {_shift(s, served.get(s.location, [])) for s in setters} - {None}
    return shifts.pop() if len(shifts) == 1 else None


def _plus(shift: int | None) -> str:
    return "i" if not shift else f"i + {shift}" if shift > 0 else f"i - {-shift}"


def _consequence(result: ScanResult, rows: list[ModelRow]) -> tuple[Consequence | None, str]:
    """What the drafts of the classes this setter serves get from it: the worst over the
    published drafts of their families (the catalogue), else over the trainers' default
    layouts. A setter that differs from the majority but serves every one of them right is
    fragile. Without one id convention (a fork scanned with every profile) nothing is claimed."""
    if conventions(result).embedding_id is None:
        return Consequence.FRAGILE, (
            "the selected profiles disagree on what a draft's ids mean, so which states a draft gets here is not "
            "decided; this setter maps ids unlike most of its siblings"
        )
    found = outcomes(result, rows)
    graded = grade(found, none="no draft of the catalogue could be traced through this setter")
    if graded.consequence is None:
        return (
            Consequence.FRAGILE,
            (graded.effect or "")
            + "; a draft written in another id convention would be mapped differently here than on the engine's other"
            " models",
        )
    effect = graded.effect or ""
    if graded.consequence is Consequence.FRAGILE:
        effect += (
            "; a draft written in another id convention would be mapped differently here than on the engine's other"
            " models"
        )
    return graded.consequence, effect
