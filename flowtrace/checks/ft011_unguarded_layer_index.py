"""FT011 unguarded-layer-index: a setter indexes the layer list with config ids without a range check."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterator

from flowtrace.model.consequence import Consequence
from flowtrace.checks.draft_outcomes import grade, outcomes
from flowtrace.checks.setter_groups import served_rows
from flowtrace.checks.base import Example, Finding, Graded, Rule
from flowtrace.model.facts import ProblemKind

_INDEXING = re.compile(r"self\.(\w+)\[\s*(\w+)\s*\]")


if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult


class UnguardedLayerIndex(Rule):
    code = "FT011"
    name = "unguarded-layer-index"
    consequence = None  # a capability note unless a catalogue draft's ids make the setter raise
    other_consequences = (Consequence.CRASH_STARTUP,)
    summary = "A setter indexes the layer list with config ids without a range check."
    rationale = (
        "Draft ids come from a config file. Indexing self.layers with them raises IndexError for an "
        "out-of-range id and silently picks the wrong layer for a negative one (-1 is the last layer)."
    )
    kind = ProblemKind.UNGUARDED_LAYER_INDEX
    fix = "Check 0 <= id < len(self.layers) before indexing, and reject or map negative ids explicitly."
    valid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExModel(SibAModel):
    def set_eagle3_layers_to_capture(self, layer_ids):
        for layer_id in layer_ids:
            if 0 <= layer_id < len(self.layers):
                setattr(self.layers[layer_id], "_is_layer_to_capture", True)
"""
        ),
    )
    invalid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExModel(SibAModel):
    def set_eagle3_layers_to_capture(self, layer_ids):
        for layer_id in layer_ids:
            setattr(self.layers[layer_id], "_is_layer_to_capture", True)
""",
            line=4,
            kind=ProblemKind.UNGUARDED_LAYER_INDEX,
            message="indexes self.layers[layer_id] with draft-config ids and no range check",
            consequence=None,
            severity="info",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        layers = result.project.conv.layers_attributes
        served = served_rows(result)
        for ff in result.files:
            for s in ff.setters:
                for m in _INDEXING.finditer(s.source):
                    if m.group(1) not in layers or m.group(2).isdigit():
                        continue
                    if "len(self." in s.source or "range(" in s.source:
                        continue
                    yield self.finding(
                        s.location,
                        f"{s.class_qualname.rsplit('.', 1)[-1]}.{s.method} indexes self.{m.group(1)}[{m.group(2)}] with"
                        " draft-config ids and no range check",
                        f"{s.class_qualname}.{s.method}",
                        m.group(0),
                        **_graded(result, served.get(s.location, []), m.group(1)),
                    )
                    break


def _graded(result: ScanResult, rows: list[ModelRow], attribute: str) -> Graded:
    """A start-up crash for the catalogue drafts whose ids make this setter raise (IndexError
    on an index past the layer list: an error that does not say why); none does: a note."""
    found = outcomes(result, rows)
    raising = [o for o in found if o.consequence is Consequence.CRASH_STARTUP]
    if raising:
        graded = grade(raising)
        return {"consequence": graded.consequence, "effect": graded.effect}
    why = (
        f"an id whose index falls outside self.{attribute} raises IndexError when the engine sets the layers at"
        " start-up"
    )
    return {"consequence": None, "effect": f"{why}; no draft of the catalogue for these classes asks for one"}
