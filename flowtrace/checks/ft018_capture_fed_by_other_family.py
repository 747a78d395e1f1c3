"""FT018 capture-fed-by-other-family: a capture loop is set only by another capture family's setter (DFlash, DSpark),
never by the EAGLE-3 setter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.example_code import PLAIN_CAPTURING_MODEL, module
from flowtrace.model.consequence import Consequence
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.targets import conventions, method_title, short
from flowtrace.checks.unset_sites import unset_capture_sites
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


class CaptureFedByOtherFamily(Rule):
    code = "FT018"
    name = "capture-fed-by-other-family"
    consequence = Consequence.REFUSED_STARTUP
    kind = ProblemKind.CAPTURE_FED_BY_OTHER_FAMILY
    summary = (
        "A capture loop is set only by another capture family's setter (DFlash, DSpark), never by the EAGLE-3 setter."
    )
    rationale = (
        "Engines share one capture attribute between speculative methods. When only another family's "
        "setter writes it, the model captures for that method, but EAGLE-3 cannot be enabled for it: the "
        "engine looks for the EAGLE-3 setter and refuses the draft."
    )
    fix = "Add the EAGLE-3 setter beside the other family's (mapping the draft's ids with the engine's convention)."
    valid = (
        Example(
            module(PLAIN_CAPTURING_MODEL, """\
class ExForCausalLM(Module):
    def __init__(self, config):
        self.model = ExModel(config)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.layers_to_capture = [val + 1 for val in layer_ids]

    def set_dflash_layers_to_capture(self, layer_ids):
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
        self.model = ExModel(config)

    def set_dflash_layers_to_capture(self, layer_ids):  # DFlash only: no EAGLE-3 setter
        self.model.layers_to_capture = [val + 1 for val in layer_ids]
""",
                """\
EntryClass = ExForCausalLM
""",
            ),
            line=11,
            kind=ProblemKind.CAPTURE_FED_BY_OTHER_FAMILY,
            message="is set only by set_dflash_layers_to_capture",
            consequence=Consequence.REFUSED_STARTUP,
            severity="info",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        cc = conventions(result)
        setter = next(iter(result.project.conv.setter_order), "the EAGLE-3 setter")
        for row, holder, site, feed in unset_capture_sites(result, other_family=True):
            use = sorted(feed, key=lambda u: (u.location.file, u.location.line))[0]
            method = use.function.split(".")[-1]
            family = cc.family_of(method)
            yield self.finding(
                site.location,
                f"{short(site.class_qualname)}'s capture loop ({site.location}) is set only by"
                f" {method} ({family.name if family else 'another family'}, {use.location}); {row.name} has no"
                f" {setter}(), so {method_title(result)} cannot be enabled for it",
                holder,
                f"{site.function}:{method}",
                fix=(
                    f"Add the {method_title(result)} setter beside the other family's (mapping the draft's ids"
                    " with the engine's convention)."
                ),
                steps=(
                    ("registered class", row.location),
                    ("other family's setter", use.location),
                    ("capture site", site.location),
                ),
            )
