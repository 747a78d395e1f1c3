"""FT010 unreachable-last-layer: the last layer's output (boundary L, before the final norm) cannot be captured."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.trace import trace_row
from flowtrace.checks.draft_outcomes import Grade, default_outcome, grade, outcomes
from flowtrace.model.consequence import Consequence
from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.setter_groups import PROBE_LAYERS, joined_names, setter_groups
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult


def _reaches(result: ScanResult, row: ModelRow, ids: list[int], boundary: int) -> bool:
    traced = trace_row(result.project, row, ids, PROBE_LAYERS)
    return traced.named_boundaries is not None and boundary in traced.named_boundaries


class UnreachableLastLayer(Rule):
    code = "FT010"
    name = "unreachable-last-layer"
    consequence = None  # a capability note: info
    summary = "The last layer's output (boundary L, before the final norm) cannot be captured."
    rationale = (
        "A loop that records each layer's input sees boundaries 0..L-1 only. A draft trained on the last "
        "layer's output (id L-1 as 'output of layer i', or HF index L-1+1) is served nothing for that slot."
    )
    kind = ProblemKind.LAST_LAYER_UNREACHABLE
    other_consequences = (Consequence.CRASH_SERVING, Consequence.SILENT_WRONG, Consequence.CRASH_STARTUP)
    fix = (
        "Record the stream after the loop when the last index is requested (as some engines do with `if self.end_layer"
        " in ...`)."
    )
    valid = (
        Example(
            module("""\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if self.end_layer in self.layers_to_capture:
            aux_hidden_states.append(hidden_states + residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states
""", causal_lm()), 'records b = L after the loop'
        ),
    )
    invalid = (
        Example(
            module(CAPTURING_MODEL, causal_lm()),
            "records each layer's input only",
            line=12,
            kind=ProblemKind.LAST_LAYER_UNREACHABLE,
            message="the last layer's output (b=L) is never captured",
            consequence=None,
            severity="info",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        L = PROBE_LAYERS
        for (setter_loc, site_loc), rows in sorted(
            setter_groups(result).items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))
        ):
            row = rows[0]
            site = row.chain.site if row.chain is not None else None
            if site is None:  # setter_groups holds rows with a capture site only
                continue
            if any(_reaches(result, row, [i], L) for i in (L - 1, L)):
                continue
            graded = _consequence(result, rows)
            yield self.finding(
                site_loc,
                f"{joined_names(rows)}: the last layer's output (b=L) is never captured ({site.note})",
                row.qualname,
                f"last:{site.point}",
                steps=(("setter", setter_loc), ("capture site", site_loc)),
                consequence=graded.consequence,
                effect=graded.effect,
                affects=(r.qualname for r in rows),
            )


def _consequence(result: ScanResult, rows: list[ModelRow]) -> Grade:
    """A capability note unless a draft asks for b = L: a published draft of these classes'
    families (or a trainer's default layout, for a family with none) whose trained layout
    holds its own L, or the engine's default. Then the worst of what they get."""
    found = outcomes(result, rows, wanted=lambda c: c.layers in c.trained)
    defaults = [d for d in (default_outcome(result, row) for row in rows[:1]) if d is not None and d.wrong]
    return grade(
        found + defaults, served_right=None,
        none="no draft of the catalogue for these classes asks for b=L, nor does the engine's default",
    )
