"""FT027 layers-run-without-capture: a batch path of a capturing forward hands layers to another routine without the
capture."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.example_code import causal_lm, module
from flowtrace.checks.targets import conventions, is_target
from flowtrace.model.consequence import Consequence
from flowtrace.model.facts import Location, ProblemKind
from flowtrace.model.links import ForwardPathLink

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult

_OVERLAP_MODEL = '''\
def run_layers_overlapped(layers, hidden_states, residual):
    for layer in layers:
        hidden_states, residual = layer(hidden_states, residual)
    return hidden_states, residual


class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.first_dense = config.first_k_dense_replace
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states, batch):
        residual = None
        end = self.end_layer
        if batch.can_run_tbo:
            end = self.first_dense
        aux_hidden_states = []
        for i in range(self.start_layer, end):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if end != self.end_layer:
            hidden_states, residual = run_layers_overlapped(self.layers[end:self.end_layer], hidden_states, residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states
'''
"""An inner model whose two-batch-overlap batches run the layers after the dense ones through
another routine, without the collector (line 25)."""


class LayersRunWithoutCapture(Rule):
    code = "FT027"
    name = "layers-run-without-capture"
    kind = ProblemKind.LAYERS_RUN_WITHOUT_CAPTURE
    consequence = Consequence.CRASH_SERVING
    summary = "A batch path of a capturing forward hands layers to another routine without the capture."
    rationale = (
        "Some forwards run part of the layers, or all of them, through a second routine for some batches "
        "(two-batch overlap after the dense layers, staged or split batches). Handed only the layers, that routine "
        "records nothing: on those batches the draft gets fewer states than its fc has slots. A fixed-slot "
        "collector raises at its count check; a list is concatenated short and the fc's projection raises on the "
        "shape. Unless the engine refuses that path while a draft is served, every such batch crashes the "
        "forward."
    )
    fix = (
        "Hand the routine the collector (and the capture indices) so it records the layers it runs, or refuse the path"
        " while a draft is served."
    )
    valid = (
        Example(
            module(_OVERLAP_MODEL.replace(
                "run_layers_overlapped(self.layers[end:self.end_layer], hidden_states, residual)",
                "run_layers_overlapped(self.layers[end:self.end_layer], hidden_states, residual, aux_hidden_states)",
            ).replace(
                "def run_layers_overlapped(layers, hidden_states, residual):",
                "def run_layers_overlapped(layers, hidden_states, residual, aux=None):",
            ), causal_lm()),
            note="the routine is handed the collector: it may record the layers it runs",
        ),
    )
    invalid = (
        Example(
            module(_OVERLAP_MODEL, causal_lm()), line=25, kind=ProblemKind.LAYERS_RUN_WITHOUT_CAPTURE,
            message="raises on two-batch overlap batches", consequence=Consequence.CRASH_SERVING, severity="error",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        cc = conventions(result)
        found: dict[Location, tuple[ForwardPathLink, list[str]]] = {}
        for row in result.rows:
            if not row.registered or row.capture is None or row.chain is None or not is_target(row, result.project, cc):
                continue
            for path in row.chain.serving.skipping:  # link 8: the forward's paths without the capture
                entry = found.setdefault(path.run.location, (path, []))
                entry[1].append(row.name)
        for location in sorted(found, key=lambda loc: (loc.file, loc.line)):
            path, names = found[location]
            yield self._finding(path, sorted(names))

    def _finding(self, path: ForwardPathLink, names: list[str]) -> Finding:
        run = path.run
        who = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        return self.finding(
            run.location,
            f"{run.function} runs {run.layers} through {run.callee}() without the capture on {path.batches()} "
            f"(under `{run.condition}`): {who} raises on {path.batches()}: {path.how}",
            run.class_qualname,
            f"{run.function}:{run.callee}:{run.layers}",
            steps=(
                ("capture site", path.site_at),
                ("layers run without the capture", run.location),
                ("raises", path.raises_at),
            ),
            consequence=Consequence.CRASH_SERVING,
            effect=f"every {path.words} batch served with a draft runs those layers without recording them: {path.how}",
        )
