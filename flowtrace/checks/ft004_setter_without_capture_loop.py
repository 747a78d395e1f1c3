"""FT004 setter-without-capture-loop: a setter writes a capture attribute that no forward reads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.analysis.graph import models_without_site
from flowtrace.model.consequence import Consequence
from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module
from flowtrace.checks.targets import unpack_failure
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.facts import Location, ProblemKind
from flowtrace.model.links import UnreadLink

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


_MARKS_MODEL = """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            layer = self.layers[i]
            if getattr(layer, "_is_layer_to_capture", False):
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = layer(hidden_states, residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states
"""
"""An inner model whose loop decides by a per-layer mark, which the usual setter never sets."""


class SetterWithoutCaptureLoop(Rule):
    code = "FT004"
    name = "setter-without-capture-loop"
    consequence = Consequence.CRASH_SERVING
    summary = "A setter writes a capture attribute that no forward reads."
    rationale = (
        "The setter stores the ids, but the model it writes to has no layer loop that checks them: the "
        "engine reports capture as enabled and hands the draft an empty or stale tensor."
    )
    kind = ProblemKind.NO_CAPTURE_SITE
    other_consequences = (Consequence.CRASH_STARTUP,)
    fix = (
        "Add the capture to the model's layer loop (record the stream when the index is in the attribute), or write the"
        " attribute the loop reads."
    )
    valid = (
        Example(
            module(CAPTURING_MODEL, causal_lm())
        ),
    )
    invalid = (
        Example(
            module(
                """\
class ExModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        return hidden_states  # never reads layers_to_capture
""",
                causal_lm(),
            ),
            line=26,
            kind=ProblemKind.NO_CAPTURE_SITE,
            message="ExModel has no layer loop that reads it",
            consequence=Consequence.CRASH_STARTUP,
            severity="warning",
        ),
        Example(
            module(_MARKS_MODEL, causal_lm()),
            line=36,
            kind=ProblemKind.SETTER_WRITES_UNREAD,
            message="decides by _is_layer_to_capture",
            consequence=Consequence.CRASH_SERVING,
            severity="error",
            note="the setter fills the list, the loop reads a per-layer mark nothing sets",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        yield from self._without_site(result)
        yield from self._unread(result)

    def _unread(self, result: ScanResult) -> Iterator[Finding]:
        """The holder has a capture loop, but it reads what the setters never write
        (:mod:`flowtrace.analysis.attribute_flow`): one finding per setter and loop."""
        found: dict[tuple[Location, Location], tuple[UnreadLink, list[str]]] = {}
        for row in result.rows:
            if row.chain is None or not row.chain.has(ProblemKind.SETTER_WRITES_UNREAD):
                continue
            u = row.chain.serving.unread  # link 8: what the setters write against what the forward reads
            if u is not None:
                found.setdefault((u.setter_at, u.site_at), (u, []))[1].append(row.name)
        for key in sorted(found, key=lambda k: (k[0].file, k[0].line, k[1].file, k[1].line)):
            u, names = found[key]
            who = ", ".join(sorted(names)[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            yield self.finding(
                u.setter_at,
                f"{u.words()}: nothing is captured for {who}",
                f"{u.setter_owner}.{u.setter_method}",
                f"{','.join(u.writes)}->{','.join(u.reads)}",
                kind=ProblemKind.SETTER_WRITES_UNREAD,
                steps=(("setter writes", u.setter_at), ("the loop reads something else", u.site_at)),
                consequence=Consequence.CRASH_SERVING,
                effect=(
                    "the loop never records a state, whatever ids the draft sends: the first forward that serves a"
                    " draft returns no aux states where the runner expects them and raises"
                ),
            )

    def _without_site(self, result: ScanResult) -> Iterator[Finding]:
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
            last = result.project.lookup.setters[link.owner][link.method]
            holder = chain.holder
            holder_class = holder.holder or "?"  # never None here: rows without a holder class were skipped above
            consequence, when = unpack_failure(result)
            yield self.finding(
                link.location,
                f"{link.owner.rsplit('.', 1)[-1]}.{link.method} writes"
                f" {', '.join(last.writes) or 'the capture attribute'}, but {holder_class.rsplit('.', 1)[-1]} has no"
                f" layer loop that reads it: nothing is captured for {row.name}",
                row.qualname,
                ",".join(last.writes),
                steps=(
                    *(("setter", t.location) for t in chain.transforms),
                    ("holder without a capture loop", holder.location),
                ),
                consequence=consequence,
                effect=(
                    "no layer is ever captured, so the forward returns no aux states where the runner unpacks them:"
                    f" {when}"
                ),
            )
