"""FT003 unresolved-delegate: a setter hands the layer ids to an object whose class cannot capture."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.model.consequence import Consequence
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.targets import method_title, short
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


class UnresolvedDelegate(Rule):
    code = "FT003"
    name = "unresolved-delegate"
    consequence = Consequence.CRASH_STARTUP
    summary = "A setter hands the layer ids to an object whose class cannot capture."
    rationale = (
        "Delegation (self.language_model.<setter>(ids), a holder's private setter) only works when the "
        "delegate's class defines the setter and a capture loop. Otherwise the call fails at start-up or, "
        "behind a hasattr guard, silently captures nothing."
    )
    kind = ProblemKind.DELEGATE_LACKS_SETTER
    fix = "Make the delegate's class support capture, or point the setter at the attribute that does."
    valid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExVLForConditionalGeneration(Module):
    def __init__(self, config):
        self.language_model = SibAForCausalLM(config)  # defines the setter

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)


EntryClass = ExVLForConditionalGeneration
"""
        ),
    )
    invalid = (
        Example(
            """\
class VisionOnlyModel(Module):
    def forward(self, input_ids, hidden_states):
        return hidden_states


class ExVLForConditionalGeneration(Module):
    def __init__(self, config):
        self.language_model = VisionOnlyModel(config)  # has no setter

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)


EntryClass = ExVLForConditionalGeneration
""",
            line=10,
            kind=ProblemKind.DELEGATE_LACKS_SETTER,
            message="is a VisionOnlyModel, which has no set_eagle3_layers_to_capture()",
            consequence=Consequence.CRASH_STARTUP,
            severity="warning",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        classes = result.project.lookup.classes
        for row in result.rows:
            c, chain = row.capture, row.chain
            if c is None or chain is None or c.inherited or not chain.has(ProblemKind.DELEGATE_LACKS_SETTER):
                continue  # selected on the chain's typed problem, never its text
            method = c.setter.delegate_method
            target = c.delegates_to
            yield self.finding(
                c.setter.location,
                f"{row.name}.{c.setter.method} hands the ids to {c.setter.delegate}.{method}() ({c.setter.location}), "
                f"but {c.setter.delegate} is a {short(target)}, which has no {method}()",
                row.qualname,
                f"{c.setter.delegate}.{method}",
                steps=(
                    ("setter", c.setter.location),
                    ("delegate class", classes[target].location if target in classes else None),
                ),
                effect=(
                    f"{row.name} claims {method_title(result)} support (it has the setter), and start-up dies when the"
                    f" engine sets the capture layers: AttributeError: '{short(target)}' object has no attribute"
                    f" '{method}', which does not say the model is unsupported; no draft is served wrong"
                ),
            )
