"""FT008 inconsistent-default-layers: a class's default capture (no ids in the draft config) reaches other boundaries
than its sibling setters' defaults."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.trace import trace_row
from flowtrace.checks.draft_outcomes import grade, handed_ids, outcomes
from flowtrace.model.consequence import Consequence
from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module
from flowtrace.checks.base import Example, Finding, Graded, Rule
from flowtrace.checks.targets import conventions
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult

PROBE_LAYERS = 32  # the defaults are compared at one realistic layer count


class InconsistentDefaultLayers(Rule):
    code = "FT008"
    name = "inconsistent-default-layers"
    consequence = Consequence.FRAGILE
    kind = ProblemKind.DEFAULT_BOUNDARIES_SHIFTED
    other_consequences = (Consequence.SILENT_WRONG, Consequence.CRASH_SERVING, None)
    summary = (
        "A class's default capture (no ids in the draft config) reaches other boundaries than its sibling setters'"
        " defaults."
    )
    rationale = (
        "When the draft config gives no ids, each class falls back to its own default. What matters is the "
        "boundaries the default reaches after the setter's transform and the capture point, not its text: "
        "the same `[2, n // 2, n - 3]` recorded after the layer instead of before it, or passed through "
        "`+ 1`, serves a layout shifted by one for the same draft, and acceptance collapses silently."
    )
    fix = (
        "Make the default reach the same boundaries as the engine's other setters (named in the message), or give the"
        " ids in the draft config."
    )
    valid = (
        Example(
            module(CAPTURING_MODEL, causal_lm())
        ),
    )
    invalid = (
        Example(
            module(
                CAPTURING_MODEL,
                causal_lm(
                    """\
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            layer_ids = [2, num_layers // 2, num_layers - 3]
        self.model.layers_to_capture = [val + 1 for val in layer_ids]  # the default gets + 1 too
"""
                ),
            ),
            line=35,
            kind=ProblemKind.DEFAULT_BOUNDARIES_SHIFTED,
            message="what a draft naming ids [2, 16, 29] gets in this engine's convention",
            consequence=Consequence.SILENT_WRONG,
            severity="error",
            note=(
                "the default goes through the draft ids' +1: the finding says it is the other reading of the same"
                " numbers; the class has no published draft in the catalogue, and drafts trained on the trainers'"
                " default layouts (b = 2, 16, 29, no ids) get b = 3, 17, 30: silent_wrong"
            ),
        ),
        Example(
            module(
                CAPTURING_MODEL,
                causal_lm(
                    """\
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [1, num_layers // 2 - 1, num_layers - 4]  # one below the others
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]
"""
                ),
            ),
            line=35,
            kind=ProblemKind.DEFAULT_BOUNDARIES_SHIFTED,
            message="(shifted by -1)",
            consequence=Consequence.SILENT_WRONG,
            severity="error",
            note="a default no reading of the usual numbers gives",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        # default's place -> (the place, the first row, the boundaries it captures, every row sharing it)
        by_setter: dict[str, tuple[F.Location, ModelRow, tuple[int, ...], list[ModelRow]]] = {}
        for row in result.rows:
            c, chain = row.capture, row.chain
            site = chain.site if chain is not None else None
            if not row.registered or c is None or site is None or site.point == F.UNKNOWN or c.default_location is None:
                continue
            if c.stream is not None and c.stream.kind == F.StreamKind.MUTATED_REFERENCE:
                continue  # its slots all hold one later state, whatever the default names (FT013 says so)
            boundaries = trace_row(result.project, row, None, PROBE_LAYERS).named_boundaries
            if boundaries:
                by_setter.setdefault(str(c.default_location), (c.default_location, row, tuple(boundaries), []))[
                    3
                ].append(row)
        if len(by_setter) < 3:
            return
        counts = Counter(b for _, _, b, _ in by_setter.values())
        majority, n = counts.most_common(1)[0]
        if n * 2 <= len(by_setter):
            return
        for where, row, boundaries, rows in sorted(by_setter.values(), key=lambda v: str(v[0])):
            if boundaries == majority:
                continue
            shift = {b - m for b, m in zip(boundaries, majority)} if len(boundaries) == len(majority) else set()
            how = f" (shifted by {shift.pop():+d})" if len(shift) == 1 else ""
            names = ", ".join(sorted({r.name for r in rows})[:3])
            chain = row.chain
            if chain is None or chain.site is None:  # only rows with a capture site are gathered
                continue
            snippet = f"{chain.transforms[0].owner}.{chain.transforms[0].method}:{boundaries}"
            steps = (("default ids", where), ("capture site", chain.site.location))
            if _mapped_like_draft_ids(result, row, boundaries, majority):
                yield self._as_draft_ids(
                    result, where, names, rows, boundaries, majority, n, len(by_setter), snippet, steps
                )
                continue
            yield self.finding(
                where,
                f"{names}: with no ids in the draft config the default ({where}) captures b={list(boundaries)} at"
                f" L={PROBE_LAYERS}{how}, while {n} of {len(by_setter)} setters' defaults capture b={list(majority)}",
                row.qualname,
                snippet,
                steps=steps,
                **_graded(
                    result,
                    rows,
                    f"a draft config without ids gets b={list(boundaries)} here and b={list(majority)} on the engine's"
                    " other models: right only for drafts trained on this class's own default",
                ),
                affects=(r.qualname for r in rows),
            )

    def _as_draft_ids(
        self, result: ScanResult, where: F.Location, names: str, rows: list[ModelRow], boundaries: tuple[int, ...],
        majority: tuple[int, ...], n: int, total: int, snippet: str, steps: tuple[tuple[str, F.Location], ...],
    ) -> Finding:
        """The default serves what the same numbers name as draft ids in the engine's convention:
        two readings of one default, not a slip; say so, and which drafts each one serves."""
        ids = list(majority)
        row = rows[0]
        return self.finding(
            where,
            f"{names}: with no ids in the draft config the default ({where}) captures b={list(boundaries)} at"
            f" L={PROBE_LAYERS}, what a draft naming ids {ids} gets in this engine's convention, while {n} of"
            f" {total} setters' defaults capture b={ids}, the same numbers taken as capture indices",
            row.qualname,
            snippet,
            steps=steps,
            fix=(
                f"Two readings of one default: keep this one if the drafts served for {row.name} were trained on"
                f" b={list(boundaries)} (a checkpoint shipped without ids); either way, write the ids in the draft"
                " config so neither default decides."
            ),
            **_graded(
                result,
                rows,
                f"a draft config without ids gets b={list(boundaries)} here and b={ids} on the engine's other models; "
                "which is right depends on what this model's drafts were trained on, not on the majority",
            ),
            affects=(r.qualname for r in rows),
        )


def _graded(result: ScanResult, rows: list[ModelRow], difference: str) -> Graded:
    """The default matters to the drafts the engine serves it to: those whose config writes no
    ids (or writes them under a key this engine does not read), of the classes' families in the
    catalogue, else the trainers' layouts that write none. Any served wrong: the worst of
    them; all served right: fragile (the difference is real, no draft suffers from it)."""
    found = outcomes(result, rows, wanted=lambda c: handed_ids(result, c.ids, c.key) is None)
    graded = grade(found, none="no draft of the catalogue for these classes relies on the engine's default")
    effect = f"{difference}; {graded.effect}" if graded.effect else difference
    return {"consequence": graded.consequence, "effect": effect}


def _mapped_like_draft_ids(
    result: ScanResult, row: ModelRow, boundaries: tuple[int, ...], majority: tuple[int, ...]
) -> bool:
    """The class serves "no ids" exactly as it serves a draft naming the majority's default
    numbers as ids, and that is what those ids name in the engine's convention (b = id -
    embedding_id): its default is the convention applied, where the others take the numbers
    as capture indices."""
    embedding = conventions(result).embedding_id
    if embedding is None or len(boundaries) != len(majority):
        return False
    if tuple(m - embedding for m in majority) != boundaries:
        return False
    as_ids = trace_row(result.project, row, list(majority), PROBE_LAYERS).named_boundaries
    return as_ids is not None and tuple(as_ids) == boundaries
