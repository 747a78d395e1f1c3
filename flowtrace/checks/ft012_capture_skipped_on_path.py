"""FT012 capture-skipped-on-path: a forward path that runs while a draft is served runs the layers without capturing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.example_code import causal_lm
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.consequence import Consequence
from flowtrace.checks.targets import conventions
from flowtrace.index.stream_facts import SELF_CALLS
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import Project
    from flowtrace.analysis.scan import ScanResult


def _self_calls(result: ScanResult) -> dict[str, dict[str, set[str]]]:
    """Class -> method -> the methods it calls on self (stream facts)."""
    out: dict[str, dict[str, set[str]]] = {}
    for ff in result.files:
        for fact in ff.stream_facts:
            if fact.kind == SELF_CALLS:
                out.setdefault(fact.class_qualname, {})[fact.function.split(".")[-1]] = set(fact.detail.split(","))
    return out


def _reachable(
    project: Project, qualname: str, entry_points: set[str], calls: dict[str, dict[str, set[str]]]
) -> set[str]:
    """Methods of the class (its own or inherited) that the entry points reach through self calls."""
    table: dict[str, set[str]] = {}
    for q in reversed(project.lookup.mro(qualname)):  # the class's own methods override its bases'
        table.update(calls.get(q, {}))
    seen, todo = set(entry_points), list(entry_points)
    while todo:
        for callee in table.get(todo.pop(), ()):
            if callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return seen


class CaptureSkippedOnPath(Rule):
    code = "FT012"
    name = "capture-skipped-on-path"
    consequence = Consequence.SILENT_WRONG
    summary = "A forward path that runs while a draft is served runs the layers without capturing."
    rationale = (
        "Engines have several forward paths (split prefill, overlap, CPU or fast paths). When one that "
        "serves speculative batches runs the decoder layers without the capture, the draft gets no "
        "auxiliary states, or stale ones from an earlier batch. Only the methods the profile names as "
        "speculative entry points (speculative_entry_points), and the methods they call on self, are "
        "judged: a path the engine reaches only without a draft (a split-prefill path of the plain "
        "target worker) never feeds one."
    )
    kind = ProblemKind.CAPTURE_SKIPPED_ON_PATH
    fix = "Capture on every path that runs the layers, or make sure the path is never used with speculative decoding."
    valid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if self.end_layer in self.layers_to_capture:
            aux_hidden_states.append(hidden_states + residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states

    def forward_split_prefill(self, hidden_states, start, end):
        residual = None
        for i in range(start, end):  # not a speculative entry point: never serves a draft
            hidden_states, residual = self.layers[i](hidden_states, residual)
        return hidden_states
"""
        ),
    )
    invalid = (
        Example(
            """\
class ExModel(Module):
    def __init__(self, config):
        self.fast = False
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        aux_hidden_states = []
        if self.fast:
            for i in range(self.start_layer, self.end_layer):
                hidden_states = self.layers[i](hidden_states)  # no capture on this path
            return hidden_states
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        return hidden_states, aux_hidden_states
"""
            + "\n\n"
            + causal_lm(),
            line=11,
            kind=ProblemKind.CAPTURE_SKIPPED_ON_PATH,
            message="runs the decoder layers while a draft is served, without the capture",
            consequence=Consequence.SILENT_WRONG,
            severity="error",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        project = result.project
        capturing = {q for q, sites in project.lookup.sites.items() if sites}
        related: dict[str, str] = {}
        for row in result.rows:  # classes whose setter feeds a capturing holder
            c = row.capture
            if c is not None and c.holder:
                related.setdefault(row.qualname, c.holder)
        entry_points = set(conventions(result).speculative_entry_points)
        calls = _self_calls(result)
        for ff in result.files:
            for loop in ff.layer_loops:
                if loop.captures:
                    continue
                if entry_points and loop.function.split(".")[-1] not in _reachable(
                    project, loop.class_qualname, entry_points, calls
                ):
                    continue  # no speculative entry point reaches this path
                owner = loop.class_qualname
                holder = owner if owner in capturing else related.get(owner)
                if holder is None or holder not in capturing:
                    continue
                site = project.lookup.sites[holder][0]
                yield self.finding(
                    loop.location,
                    f"{loop.function} ({loop.location}) runs the decoder layers while a draft is served, without the"
                    f" capture that {site.function} performs ({site.location})",
                    loop.class_qualname,
                    loop.function,
                    steps=(("path without capture", loop.location), ("capture site", site.location)),
                    consequence=Consequence.SILENT_WRONG,
                    effect=(
                        f"on batches that take {loop.function}'s path no layer is captured: the draft receives no "
                        "aux states (or stale ones) for them, and nothing fails here"
                    ),
                )
