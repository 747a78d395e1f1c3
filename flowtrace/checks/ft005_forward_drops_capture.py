"""FT005 forward-drops-capture: a subclass that a capture setter feeds overrides forward and drops the capture its base
class performs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.graph import setter_written_holders
from flowtrace.model.consequence import Consequence
from flowtrace.checks.targets import unpack_failure
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


class ForwardDropsCapture(Rule):
    code = "FT005"
    name = "forward-drops-capture"
    consequence = Consequence.CRASH_SERVING
    summary = "A subclass that a capture setter feeds overrides forward and drops the capture its base class performs."
    rationale = (
        "The class inherits the capture attribute and setter, so capture looks supported, but its own "
        "forward runs the layers without recording anything."
    )
    kind = ProblemKind.FORWARD_DROPS_CAPTURE
    other_consequences = (Consequence.CRASH_STARTUP,)
    fix = "Keep the capture in the overriding forward, or call the base forward."
    valid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExModel(SibAModel):
    pass  # inherits the capturing forward


class ExForCausalLM(SibAForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        self.model = ExModel(config)


EntryClass = ExForCausalLM
"""
        ),
    )
    invalid = (
        Example(
            """\
from sglang.srt.models.sib_a import SibAForCausalLM, SibAModel

class ExModel(SibAModel):
    def forward(self, input_ids, hidden_states):
        residual = None
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](hidden_states, residual)  # base forward captured; this one does not
        return hidden_states


class ExForCausalLM(SibAForCausalLM):  # inherits the setter, which feeds ExModel
    def __init__(self, config):
        super().__init__(config)
        self.model = ExModel(config)


EntryClass = ExForCausalLM
""",  # noqa: E501 (the example renders verbatim in docs/rules.md)
            line=6,
            kind=ProblemKind.FORWARD_DROPS_CAPTURE,
            message="runs the layers without capturing, overriding SibAModel.forward",
            consequence=Consequence.CRASH_STARTUP,
            severity="warning",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        project = result.project
        # Holders some setter feeds: a class nothing can turn capture on for does not *drop* a capture.
        fed = setter_written_holders(result.graph)
        for qualname, cls in sorted(project.lookup.classes.items()):
            if "forward" not in cls.methods or project.lookup.sites.get(qualname) or qualname not in fed:
                continue
            base = next(
                (
                    q
                    for q in project.lookup.mro(qualname)[1:]
                    if any(s.function.endswith(".forward") for s in project.lookup.sites.get(q, []))
                ),
                None,
            )
            if base is None:
                continue
            loops = [
                l
                for ff in project.files
                for l in ff.layer_loops
                if l.class_qualname == qualname and l.function.endswith(".forward")
            ]
            if not loops:
                continue  # a forward that delegates (super().forward) keeps the capture
            base_site = next(s for s in project.lookup.sites[base] if s.function.endswith(".forward"))
            consequence, when = unpack_failure(result)
            yield self.finding(
                loops[0].location,
                f"{cls.name}.forward ({loops[0].location}) runs the layers without capturing, overriding"
                f" {base.rsplit('.', 1)[-1]}.forward, which captures ({base_site.location})",
                qualname,
                f"{qualname}.forward",
                steps=(
                    ("base class capture site", base_site.location),
                    ("overriding loop without capture", loops[0].location),
                ),
                consequence=consequence,
                effect=(
                    f"{cls.name}.forward returns no aux states where (hidden_states, aux_hidden_states) is unpacked:"
                    f" {when}"
                ),
            )
