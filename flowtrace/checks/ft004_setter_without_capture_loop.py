"""FT004 setter-without-capture-loop: a setter writes a capture attribute that no forward reads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.graph import models_without_site
from flowtrace.model.consequence import Consequence
from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


class SetterWithoutCaptureLoop(Rule):
    code = "FT004"
    name = "setter-without-capture-loop"
    severity = "error"
    summary = "A setter writes a capture attribute that no forward reads."
    rationale = (
        "The setter stores the ids, but the model it writes to has no layer loop that checks them: the "
        "engine reports capture as enabled and hands the draft an empty or stale tensor."
    )
    kind = ProblemKind.NO_CAPTURE_SITE
    fix = "Add the capture to the model's layer loop (record the stream when the index is in the attribute), or write the attribute the loop reads."
    valid = (
        Example(
            module(CAPTURING_MODEL, causal_lm())
        ),
    )
    invalid = (
        Example(
            module("""\
class ExModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        return hidden_states  # never reads layers_to_capture
""", causal_lm()), line=26, kind=ProblemKind.NO_CAPTURE_SITE, message='ExModel has no layer loop that reads it', consequence=Consequence.CRASH_SERVING, severity="error"
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        """A query over the graph: chains whose setter writes a holder (link 3) and reach no
        capture site (link 4); the message reads the row's links."""
        missing = models_without_site(result.graph)
        seen = set()
        for row in result.rows:
            chain = row.chain
            if row.qualname not in missing or chain is None or chain.holder is None or chain.holder.holder is None:
                continue
            if chain.transforms[0].owner != row.qualname:
                continue  # an inherited setter works for the class that defines it
            link = chain.transforms[-1]
            if (link.owner, link.method) in seen:
                continue
            seen.add((link.owner, link.method))
            last = result.project.setters[link.owner][link.method]
            holder = chain.holder
            holder_class = holder.holder or "?"  # never None here: rows without a holder class were skipped above
            yield self.finding(
                link.location,
                f"{link.owner.rsplit('.', 1)[-1]}.{link.method} writes {', '.join(last.writes) or 'the capture attribute'}, "
                f"but {holder_class.rsplit('.', 1)[-1]} has no layer loop that reads it: nothing is captured for {row.name}",
                row.qualname,
                ",".join(last.writes),
                steps=(*(("setter", t.location) for t in chain.transforms), ("holder without a capture loop", holder.location)),
                consequence=Consequence.CRASH_SERVING,
                effect=(
                    "no layer is ever captured: the first forward that serves a draft returns no aux states where the "
                    "runner expects them and raises"
                ),
            )
