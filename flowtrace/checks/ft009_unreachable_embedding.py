"""FT009 unreachable-embedding: the embedding output (boundary 0) cannot be captured, or not with the id this engine's
drafts use for it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.trace import trace_row
from flowtrace.checks.draft_outcomes import grade, outcomes
from flowtrace.model.consequence import Consequence
from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module, setter
from flowtrace.checks.base import Example, Finding, FixExample, Rule
from flowtrace.checks.setter_groups import PROBE_LAYERS, joined_names, setter_chain, setter_groups
from flowtrace.checks.targets import conventions
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.analysis.trace import TraceResult


@dataclass
class _Merged:
    """One finding being gathered: every setter group with the same setter and problem."""

    setter: F.Location
    row: ModelRow  # the first group's row: it names the chain the message describes
    rows: list[ModelRow] = field(default_factory=list)
    raised: TraceResult | None = None  # EMBEDDING_RAISES: the trace that raises
    other: int | None = None  # EMBEDDING_ID_DROPPED: the id that does reach b=0


def _boundaries(result: ScanResult, row: ModelRow, ids: list[int]) -> tuple[int, ...] | None:
    """The boundaries ``ids`` reach on a probe layer count; None when the trace cannot decide."""
    return trace_row(result.project, row, ids, PROBE_LAYERS).named_boundaries


def _majority_transform(result: ScanResult) -> str | None:
    chains = (setter_chain(r) for r in result.rows if r.registered)
    counts = Counter(c.effective_transform for c in chains if c is not None and c.site is not None)
    return counts.most_common(1)[0][0] if counts else None


_OUTPUT_MODEL = """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](hidden_states, residual)
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states + residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states
"""
"""An inner model that records each layer's output (index i is b = i + 1): the fix example."""


class UnreachableEmbedding(Rule):
    code = "FT009"
    name = "unreachable-embedding"
    consequence = Consequence.FRAGILE
    kind = ProblemKind.EMBEDDING_ID_DROPPED
    other_consequences = (Consequence.SILENT_WRONG, Consequence.CRASH_SERVING, Consequence.CRASH_STARTUP, None)
    summary = (
        "The embedding output (boundary 0) cannot be captured, or not with the id this engine's drafts use for it."
    )
    rationale = (
        "Each engine has one convention for the id that names the embedding (the profile's "
        "embedding_id: -1 where ids mean 'output of layer i', 0 where ids are boundaries). A setter "
        "whose transform drops that id, or a loop that records nothing before layer 0, gives such a "
        "draft one state fewer, or a shifted one. Classes whose trace cannot be decided are left to FT017."
    )
    fix = (
        "Map the engine's embedding id to the index the loop records before layer 0, as the engine's other setters do."
    )
    autofix = "flowtrace.fix.codemods.embedding_capture:plan"
    fix_examples = (
        FixExample(
            module(_OUTPUT_MODEL, causal_lm(setter("list(layer_ids)"))),
            module(
                _OUTPUT_MODEL.replace(
                    "        aux_hidden_states = []\n",
                    "        aux_hidden_states = []\n"
                    "        if -1 in self.layers_to_capture:\n"
                    "            aux_hidden_states.append(hidden_states if residual is None else hidden_states +"
                    " residual)\n",
                ),
                causal_lm(setter("list(layer_ids)")),
            ),
            "the founding story: output-point loop, ids unchanged; -1 is recorded before the loop",
        ),
    )
    valid = (
        Example(
            module(CAPTURING_MODEL, causal_lm()), 'SGLang: -1 + 1 = 0, recorded before layer 0'
        ),
    )
    invalid = (
        Example(
            module(CAPTURING_MODEL, causal_lm(setter("list(layer_ids)"))),
            "SGLang: -1 is never a loop index; no draft of the catalogue asks for the embedding, so a note",
            line=35,
            kind=ProblemKind.EMBEDDING_ID_DROPPED,
            message="id -1 (the embedding in this engine's draft configs) reaches no boundary",
            consequence=None,
            severity="info",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        # One finding per setter and kind of problem: an interface setter shared by dozens of
        # models is one defect, not one per model file.
        cc = conventions(result)
        if result.method is not None and result.method.none_embedding:
            return  # the method's drafts cannot name the embedding (its runner refuses such ids)
        embedding = cc.embedding_id if cc.embedding_id is not None else -1
        merged: dict[tuple[str, ProblemKind], _Merged] = {}
        for (entry_loc, _), rows in setter_groups(result).items():
            row = rows[0]
            chain = row.chain
            if chain is None:  # setter_groups holds rows with a setter chain only
                continue
            # Report at the setter that decides the mapping (the place to fix), not at each
            # wrapper that hands the ids on to it: one finding per cause.
            setter_loc = next((t.location for t in chain.transforms if t.transform != F.DELEGATES), entry_loc)
            if chain.has(ProblemKind.INDEX0_RAISES):
                continue  # recording index 0 raises: FT022 reports that, with the line
            traced = trace_row(result.project, row, [embedding], PROBE_LAYERS)
            if traced.outcome == F.Outcome.RAISES:  # e.g. a fixed-slot packer fed one state fewer
                merged.setdefault(
                    (str(setter_loc), ProblemKind.EMBEDDING_RAISES), _Merged(setter_loc, row, raised=traced)
                ).rows.extend(rows)
                continue
            reached = traced.named_boundaries
            if reached is None or 0 in reached:
                continue
            other = next((i for i in (-1, 0) if i != embedding and 0 in (_boundaries(result, row, [i]) or ())), None)
            if other is None and chain.site is not None and chain.site.embedding_capturable is not False:
                continue  # the site records before layer 0; the setter's mapping is FT007's question
            kind = ProblemKind.EMBEDDING_ID_DROPPED if other is not None else ProblemKind.EMBEDDING_UNREACHABLE
            merged.setdefault((str(setter_loc), kind), _Merged(setter_loc, row, other=other)).rows.extend(rows)
        majority = _majority_transform(result)
        for (_, kind), m in sorted(merged.items(), key=lambda kv: (kv[0][0], kv[0][1].value)):
            setter_loc, row, rows, other = m.setter, m.row, m.rows, m.other
            c = row.chain
            if c is None:
                continue
            site = c.site.location if c.site else None
            if kind is ProblemKind.EMBEDDING_RAISES and m.raised is not None:
                raised = m.raised
                message = (
                    f"{joined_names(rows)}: asking for the embedding (id {embedding}) raises at {raised.raises_at}:"
                    f" {raised.reason}"
                )
                fix = (
                    "Make the capture accept the engine's embedding id (or size the collector by the states it really"
                    " records)."
                )
                raising: tuple[tuple[str, F.Location | None], ...] = (
                    ("setter", setter_loc),
                    ("raises", raised.raises_at),
                    ("capture site", site),
                )
                yield self.finding(
                    setter_loc,
                    message,
                    row.qualname,
                    f"embedding:{kind.value}:{c.effective_transform}",
                    steps=raising,
                    kind=kind,
                    fix=fix,
                    consequence=Consequence.CRASH_SERVING,
                    effect=(
                        f"a draft asking for the embedding (id {embedding}) makes the engine raise at"
                        f" {raised.raises_at} in the first forward"
                    ),
                    affects=(r.qualname for r in rows),
                )
                continue
            if kind is ProblemKind.EMBEDDING_ID_DROPPED:
                message = (
                    f"{joined_names(rows)}: id {embedding} (the embedding in this engine's draft configs) reaches no"
                    f" boundary through {c.transforms[0].method}'s {c.effective_transform} transform ({setter_loc});"
                    f" only id {other} reaches b=0"
                )
                fix = (
                    f"Map id {embedding} to the index recorded before layer 0 ({site}), as the engine's"
                    f" {majority} setters do."
                )
            else:
                message = (
                    f"{joined_names(rows)}: no id reaches the embedding (b=0): the capture at {site} is"
                    f" {c.site.point if c.site else F.UNKNOWN} and nothing is recorded before layer 0"
                )
                fix = (
                    f"Record the stream before the first layer when index 0 is requested (at {site}), so id"
                    f" {embedding} reaches b=0."
                )
            flow = (("setter", setter_loc), ("capture site", site))
            consequence, effect = _consequence(result, rows, kind)
            yield self.finding(
                setter_loc,
                message,
                row.qualname,
                f"embedding:{kind.value}:{c.effective_transform}",
                steps=flow,
                kind=kind,
                fix=fix,
                consequence=consequence,
                effect=effect,
                affects=(r.qualname for r in rows),
            )


def _consequence(result: ScanResult, rows: list[ModelRow], kind: ProblemKind) -> tuple[Consequence | None, str | None]:
    """A dropped embedding id matters to the drafts that ask for the embedding: the published
    drafts of these classes' families (the catalogue) whose trained layout holds b = 0, else
    the trainers' default layouts that do. None asks: a capability note (info). An embedding
    no id reaches is a capability note as well."""
    if kind is not ProblemKind.EMBEDDING_ID_DROPPED:
        return None, None
    found = outcomes(result, rows, wanted=lambda c: 0 in c.trained)
    graded = grade(found, none="no draft of the catalogue for these classes asks for the embedding (b = 0)")
    return graded.consequence, graded.effect
