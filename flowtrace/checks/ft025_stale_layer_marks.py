"""FT025 stale-layer-marks: a setter marks the layers it is handed ids for and never clears the others, so a second call
keeps the first call's marks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.serving import SetterCall, serving_plan
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.targets import short
from flowtrace.model.consequence import Consequence
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.model import facts as F


_MODEL = """\
from sglang.srt.layers.base import Module, ModuleList


class ExLayer(Module):
    def forward(self, hidden_states, captured=None):
        if captured is not None:
            captured.append(hidden_states)
        return hidden_states


class ExModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([ExLayer() for _ in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def set_eagle3_layers_to_capture(self, layers_to_capture):
        self.layers_to_capture = layers_to_capture
{body}
    def forward(self, input_ids, hidden_states):
        aux_hidden_states = []
        for layer in self.layers:
            hidden_states = layer(hidden_states, captured=aux_hidden_states if getattr(layer, "_is_layer_to_capture", False) else None)
        return hidden_states, aux_hidden_states


EntryClass = ExModel
"""  # noqa: E501 (the example renders verbatim in docs/rules.md)


_TWO_CALLS = """

class ExModelRunner:
    def initialize(self):
        self.model.set_eagle3_layers_to_capture([2, 3, 4])
        self.model.set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)
"""


class StaleLayerMarks(Rule):
    code = "FT025"
    name = "stale-layer-marks"
    consequence = Consequence.FRAGILE
    other_consequences = (Consequence.CRASH_SERVING,)
    kind = ProblemKind.STALE_LAYER_MARKS
    summary = (
        "A setter marks the layers it is handed ids for and never clears the others, so a second call keeps the first"
        " call's marks."
    )
    rationale = (
        "The forward decides by a flag each layer carries, and the setter only ever turns flags on. With one "
        "call at start-up the right layers are marked; a second call with other ids (a server switching drafts, "
        "two capture families set on one model) leaves the first call's layers marked, and the forward records "
        "the union: the draft's fc then receives more states than it was trained on."
    )
    fix = "Clear the mark on every layer before marking the requested ones (or set it to `i in ids` for each layer)."
    valid = (
        Example(
            _MODEL.format(
                body="""\
        for i, layer in enumerate(self.layers):
            layer._is_layer_to_capture = i in layers_to_capture
"""
            )
        ),
    )
    invalid = (
        Example(
            _MODEL.format(
                body="""\
        for layer_id in self.layers_to_capture:
            if 0 <= layer_id < len(self.layers):
                setattr(self.layers[layer_id], "_is_layer_to_capture", True)
"""
            ),
            line=20,
            kind=ProblemKind.STALE_LAYER_MARKS,
            message="never turns it off for the others",
            consequence=Consequence.FRAGILE,
            severity="warning",
        ),
        Example(
            _MODEL.format(
                body="""\
        for layer_id in self.layers_to_capture:
            if 0 <= layer_id < len(self.layers):
                setattr(self.layers[layer_id], "_is_layer_to_capture", True)
"""
            )
            + _TWO_CALLS,
            line=20,
            kind=ProblemKind.STALE_LAYER_MARKS,
            message="the runner calls the setter 2 times at start-up",
            consequence=Consequence.CRASH_SERVING,
            severity="error",
            note=(
                "the engine's runner really calls it twice (ids of its own, then the draft's): the first prefill"
                " records both"
            ),
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        """Graded by what the runner really does (:mod:`flowtrace.analysis.serving`): a start-up
        that calls the setter more than once with other ids (the defaults, then the draft's)
        leaves the union marked on the first prefill; one call keeps it a fragile convention."""
        reached = _reached_by(result)
        calls = _repeated_calls(result)
        for ff in result.files:
            for setter in ff.setters:
                for mark in setter.marks:
                    if mark.cleared or mark.read_at is None:
                        continue  # no stale marks, or none this class reads back (decided elsewhere)
                    yield self._finding(setter, mark, reached.get((setter.class_qualname, setter.method), []), calls)

    def _finding(
        self, setter: F.SetterFact, mark: F.LayerMarkFact, classes: list[str], calls: tuple[SetterCall, ...]
    ) -> Finding:
        owner = short(setter.class_qualname)
        via = f" (reached from {', '.join(sorted(classes)[:6])}{', …' if len(classes) > 6 else ''})" if classes else ""
        head = (
            f"{owner}.{setter.method} sets {mark.mark} on {mark.container}[id] for each id it is handed, and never"
            f" turns it off for the others{via}; the forward decides by that mark ({mark.read_at})"
        )
        steps = [
            ("setter", setter.location),
            ("mark set, never cleared", mark.location),
            ("forward reads the mark", mark.read_at),
        ]
        if calls and classes:
            said = "; ".join(c.words() for c in calls)
            return self.finding(
                mark.location,
                f"{head}; the runner calls the setter {len(calls)} times at start-up with other ids ({said}): "
                "prefill records the union of their layers",
                f"{setter.class_qualname}.{setter.method}",
                mark.mark,
                steps=(*steps, *(("runner's setter call", c.step.location) for c in calls)),
                consequence=Consequence.CRASH_SERVING,
                effect=(
                    "for a draft whose ids differ from the default, the first prefill records the default layers'"
                    " states and the draft's: more states than the draft's fc has slots, and its projection raises on"
                    " the shape"
                ),
            )
        return self.finding(
            mark.location,
            head,
            f"{setter.class_qualname}.{setter.method}",
            mark.mark,
            steps=steps,
            consequence=Consequence.FRAGILE,
            effect=(
                "one call at start-up marks the right layers; a second call with other ids keeps the first call's"
                " layers marked, so the forward records their states too and the draft's fc receives more states than"
                " it was trained on"
            ),
        )


def _repeated_calls(result: ScanResult) -> tuple[SetterCall, ...]:
    """The setter calls of the runner's representative start-up when they hand over more than
    one kind of ids (the defaults and the draft's, or two spellings); empty otherwise."""
    path = serving_plan(result.project.lookup).representative()
    if path is None:
        return ()
    kinds = {(c.step.ids, c.step.ids_text) for c in path.calls}
    return path.calls if len(path.calls) > 1 and len(kinds) > 1 else ()


def _reached_by(result: ScanResult) -> dict[tuple[str, str], list[str]]:
    """(setter class, method) -> the row classes whose capture chain runs that setter."""
    out: dict[tuple[str, str], list[str]] = {}
    for row in result.rows:
        for s in row.capture.chain if row.capture is not None else ():
            names = out.setdefault((s.class_qualname, s.method), [])
            if row.name not in names:
                names.append(row.name)
    return out
