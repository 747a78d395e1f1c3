"""FT006 capture-flag-never-set: the forward only returns captured states when a flag is on, and the setter never turns
it on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module, setter
from flowtrace.model.consequence import Consequence
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.facts import ProblemKind, ReturnKind
from flowtrace.model.links import NOT_BREAKING

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


class CaptureFlagNeverSet(Rule):
    code = "FT006"
    name = "capture-flag-never-set"
    consequence = Consequence.SILENT_WRONG
    summary = "The forward only returns captured states when a flag is on, and the setter never turns it on."
    rationale = (
        "Engines gate the unpacking of (hidden, aux) on a flag such as capture_aux_hidden_states. A setter "
        "that writes the layer list but not the flag makes the model compute the captures and discard them."
    )
    kind = ProblemKind.FLAG_NEVER_SET
    fix = "Set the flag in the setter (as its siblings do) before writing the capture indices."
    valid = (
        Example(
            module(CAPTURING_MODEL, causal_lm())
        ),
    )
    invalid = (
        Example(
            module(CAPTURING_MODEL, causal_lm(setter(sets_flag=False))),
            "the setter never turns the flag on",
            line=35,
            kind=ProblemKind.FLAG_NEVER_SET,
            message=(
                "reads self.capture_aux_hidden_states to return the captured states (sglang/srt/models/example.py:29),"
                " but set_eagle3_layers_to_capture never sets it"
            ),
            consequence=Consequence.SILENT_WRONG,
            severity="error",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        project = result.project
        flags = project.conv.flags  # profile flags: the fallback below; link 6 needs none
        uses = [u for ff in result.files for u in ff.attribute_uses if u.attribute in flags]
        seen = set()
        for row in result.rows:
            c = row.capture
            if c is None or not row.registered or row.chain is None:
                continue
            link = row.chain.returns
            if link is not None and link.kind == ReturnKind.FLAG_NEVER_SET:  # link 6 decided it: the states are dropped
                if c.setter.location not in seen:
                    seen.add(c.setter.location)
                    yield self.finding(
                        c.setter.location,
                        f"{row.name}: {link.reason}",
                        row.qualname,
                        link.flag or "",
                        steps=(
                            ("setter", c.setter.location),
                            *(("flag's value", e) for e in link.evidence),
                            ("return without the states", link.location),
                        ),
                    )
                continue
            if row.chain.kinds() - NOT_BREAKING - {ProblemKind.RETURN_DROPPED}:
                continue  # a chain broken earlier is another rule's finding (selected on kinds)
            mro = set(project.lookup.mro(row.qualname))
            read = [
                u
                for u in uses
                if u.kind == "read" and u.class_qualname in mro and not u.function.split(".")[-1].startswith("set_")
            ]
            if not read:
                continue
            setter_classes = {s.class_qualname for s in c.chain}
            written = [
                u
                for u in uses
                if u.kind == "write"
                and u.class_qualname in setter_classes | mro
                and u.function.split(".")[-1] in {s.method for s in c.chain}
            ]
            if written:
                continue
            key = c.setter.location
            if key in seen:
                continue
            seen.add(key)
            yield self.finding(
                c.setter.location,
                f"{row.name}: {read[0].function} reads self.{read[0].attribute} to return the captured states"
                f" ({read[0].location}), but {c.setter.method} never sets it",
                row.qualname,
                read[0].attribute,
                steps=(("setter", c.setter.location), ("flag read by the forward", read[0].location)),
            )
