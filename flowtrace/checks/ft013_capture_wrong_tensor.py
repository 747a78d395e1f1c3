"""FT013 capture-wrong-tensor: the captured tensor is not the residual stream: hidden_states without the residual, or a
reference updated in place later."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.example_code import causal_lm
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.index.stream_facts import FOLDS_RESIDUAL
from flowtrace.model.consequence import Consequence
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.model.facts import StreamFact
    from flowtrace.analysis.scan import ScanResult


def _folding_layers(result: ScanResult) -> dict[str, list[StreamFact]]:
    """Module -> layer forwards that return the stream with the residual already added."""
    out: dict[str, list[StreamFact]] = {}
    for ff in result.files:
        for fact in ff.stream_facts:
            if fact.kind == FOLDS_RESIDUAL:
                out.setdefault(fact.class_qualname.rpartition(".")[0], []).append(fact)
    return out


class CaptureWrongTensor(Rule):
    code = "FT013"
    name = "capture-wrong-tensor"
    consequence = Consequence.SILENT_WRONG
    summary = (
        "The captured tensor is not the residual stream: hidden_states without the residual, or a reference updated in"
        " place later."
    )
    rationale = (
        "When layers return (hidden_states, residual), the residual stream at a boundary is their sum. "
        "Capturing hidden_states alone gives the draft only the last sub-layer's delta, a tensor it was "
        "never trained on."
    )
    kind = ProblemKind.RESIDUAL_MISSING
    fix = (
        "Capture hidden_states + residual (or the helper that adds them), or clone() a tensor that is updated in place"
        " afterwards."
    )
    valid = (
        Example(
            """\
class ExDecoderLayer(Module):
    def forward(self, hidden_states, residual):
        residual = hidden_states
        hidden_states = hidden_states * 2
        hidden_states = residual + hidden_states  # the layer adds the residual itself
        return hidden_states, residual


class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([ExDecoderLayer() for _ in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](hidden_states, residual)
            if i + 1 in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
        return hidden_states, aux_hidden_states
"""
        ),
    )
    invalid = (
        Example(
            """\
class ExDecoderLayer(Module):
    def forward(self, hidden_states, residual):
        residual = hidden_states if residual is None else hidden_states + residual
        return hidden_states * 2, residual  # a delta and the residual, apart


class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([ExDecoderLayer() for _ in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](hidden_states, residual)
            if i + 1 in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
        return hidden_states, aux_hidden_states
"""
            + "\n\n"
            + causal_lm(),
            "hidden_states alone is the delta",
            line=19,
            kind=ProblemKind.RESIDUAL_MISSING,
            message="the residual is missing",
            consequence=Consequence.SILENT_WRONG,
            severity="error",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        folds = _folding_layers(result)
        for ff in result.files:
            for site in ff.capture_sites:
                if site.mutated_later:
                    yield self.finding(
                        site.location,
                        f"{site.function} stores a reference to `{site.captured_expression}` and later updates it in"
                        f" place (`{site.mutated_later}`): the captured state changes after it was recorded",
                        site.class_qualname,
                        f"{site.captured_expression}:{site.mutated_later}",
                        kind=ProblemKind.MUTATED_AFTER_CAPTURE,
                        consequence=Consequence.SILENT_WRONG,
                        effect=(
                            f"the draft silently receives `{site.captured_expression}` as updated later by "
                            f"`{site.mutated_later}`, not the state at the boundary it asked for"
                        ),
                    )
                    continue
                expr = site.captured_expression
                if not site.split_residual or not expr or site.uses_residual:
                    continue
                module = site.class_qualname.rpartition(".")[0]
                if any(
                    o.uses_residual and o.function == site.function and o.loop_range == site.loop_range
                    for o in ff.capture_sites
                ):
                    continue  # `h if residual is None else h + residual` written as two branches
                if folds.get(module):
                    continue  # the layers add the residual themselves: their first output is the stream
                yield self.finding(
                    site.location,
                    f"{site.function} captures `{expr}` ({site.location}) although its layers return (hidden_states,"
                    " residual) and none of them adds the residual itself: the residual is missing",
                    site.class_qualname,
                    expr,
                    consequence=Consequence.SILENT_WRONG,
                    effect=(
                        f"the draft silently receives `{expr}` without the residual (the last sub-layer's output, "
                        f"not the residual stream `{expr} + residual`) at every requested boundary after the embedding"
                    ),
                )
