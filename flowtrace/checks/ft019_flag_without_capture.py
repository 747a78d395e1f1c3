"""FT019 flag-without-capture: a model unpacks (hidden, aux) under the capture flag, but nothing sets the flag and no
layer loop captures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module
from flowtrace.model.consequence import Consequence
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.targets import conventions, family_writers, method_title, short
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


class FlagWithoutCapture(Rule):
    code = "FT019"
    name = "flag-without-capture"
    consequence = Consequence.REFUSED_STARTUP
    kind = ProblemKind.FLAG_WITHOUT_CAPTURE
    summary = (
        "A model unpacks (hidden, aux) under the capture flag, but nothing sets the flag and no layer loop captures."
    )
    rationale = (
        "The wrapper was written for capture (it holds the flag and unpacks the aux states when it is "
        "on), yet no setter of any capture family turns the flag on and neither the class nor anything it "
        "builds records a state: the plumbing is dead, and EAGLE-3 cannot be enabled for the model."
    )
    fix = (
        "Add the capture loop to the inner model and the engine's setter to the wrapper (turning the flag on), or"
        " remove the dead flag."
    )
    valid = (
        Example(
            module(CAPTURING_MODEL, causal_lm())
        ),
    )
    invalid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([])

    def forward(self, input_ids, hidden_states):
        for i in range(len(self.layers)):
            hidden_states = self.layers[i](hidden_states)  # records nothing
        return hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.model = ExModel(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        hidden_states = self.model(input_ids, hidden_states)
        aux = None
        if self.capture_aux_hidden_states:  # never true
            hidden_states, aux = hidden_states
        return hidden_states, aux


EntryClass = ExForCausalLM
""",
            line=19,
            kind=ProblemKind.FLAG_WITHOUT_CAPTURE,
            message="ExForCausalLM.forward unpacks the aux states when self.capture_aux_hidden_states is set",
            consequence=Consequence.REFUSED_STARTUP,
            severity="info",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        project = result.project
        flags = project.conv.flags
        if not flags:
            return
        attributes = set(project.conv.attributes)
        others = family_writers(result, conventions(result))
        reads: dict[str, F.AttributeUseFact] = {}
        for ff in result.files:
            for use in ff.attribute_uses:
                if use.attribute in flags and use.kind == "read" and use.function.split(".")[-1] == "forward":
                    reads.setdefault(use.class_qualname, use)
        registered = {project.lookup.find_class(t) for t in project.lookup.registry}
        for qualname, use in sorted(reads.items()):
            if qualname not in registered or project.lookup.find_setter(qualname) is not None:
                continue
            mro = project.lookup.mro(qualname)
            if any(others.get(q) for q in mro):
                continue  # another capture family's setter turns it on (FT018 territory)
            built = [qualname, *project.holders.constructed(qualname)]
            if any(project.holders.site_for(c, attributes) is not None for c in built):
                continue
            name = short(qualname)
            yield self.finding(
                use.location,
                f"{name}.forward unpacks the aux states when self.{use.attribute} is set ({use.location}), but no"
                f" setter turns it on and neither {name} nor the models it builds capture a layer:"
                f" {method_title(result)} cannot be enabled for {name}",
                qualname,
                f"{use.function}:{use.attribute}",
                steps=(("wrapper", project.lookup.classes[qualname].location), ("flag test and unpack", use.location)),
            )
