"""FT002 capture-without-setter: a model has a capture loop, but no setter of any capture family can set the layers it
captures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.example_code import PLAIN_CAPTURING_MODEL, module
from flowtrace.model.consequence import Consequence
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.targets import short
from flowtrace.checks.unset_sites import unset_capture_sites
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


class CaptureWithoutSetter(Rule):
    code = "FT002"
    name = "capture-without-setter"
    consequence = Consequence.REFUSED_STARTUP
    kind = ProblemKind.CAPTURE_WITHOUT_SETTER
    summary = "A model has a capture loop, but no setter of any capture family can set the layers it captures."
    rationale = (
        "The forward records states for indices held in a capture attribute, yet no class on the path "
        "defines a setter for it (neither the EAGLE-3 setter nor another family's): the attribute keeps its "
        "empty default and the draft receives nothing."
    )
    fix = (
        "Define the engine's capture setter on the registered class (or inherit it) and write the capture attribute"
        " there."
    )
    valid = (
        Example(
            module(PLAIN_CAPTURING_MODEL, """\
class ExForCausalLM(Module):
    def __init__(self, config):
        self.model = ExModel(config)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
""", """\
EntryClass = ExForCausalLM
""")
        ),
    )
    invalid = (
        Example(
            module(
                PLAIN_CAPTURING_MODEL,
                """\
class ExForCausalLM(Module):
    def __init__(self, config):
        self.model = ExModel(config)  # no setter of any capture family
""",
                """\
EntryClass = ExForCausalLM
""",
            ),
            line=11,
            kind=ProblemKind.CAPTURE_WITHOUT_SETTER,
            message="ExModel captures layers listed in layers_to_capture",
            consequence=Consequence.REFUSED_STARTUP,
            severity="info",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        setter = next(iter(result.project.conv.setter_order), "the capture setter")
        for row, holder, site, _ in unset_capture_sites(result, other_family=False):
            yield self.finding(
                site.location,
                f"{short(site.class_qualname)} captures layers listed in"
                f" {site.attribute or 'its capture attribute'} ({site.location}), but no setter of any capture family"
                f" writes it for {row.name}, which has no {setter}()",
                holder,
                f"{site.function}:{site.attribute}",
                steps=(("registered class", row.location), ("capture site", site.location)),
                fix=f"Add {setter}() to {row.name} and write {site.attribute} on the model that runs this loop.",
            )
