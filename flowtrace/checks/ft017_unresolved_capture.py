"""FT017 unresolved-capture: a capture path could not be decided statically (unknown capture point or missing registry
target)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from flowtrace.checks.example_code import CAPTURING_MODEL, causal_lm, module
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult

_UNRESOLVED = frozenset(
    {
        ProblemKind.DELEGATE_UNRESOLVED,
        ProblemKind.HOLDER_UNRESOLVED,
        ProblemKind.SUPER_UNRESOLVED,
        ProblemKind.SETTER_WRITES_NOTHING,
    }
)
# What a class holds itself (its delegate, its holder): unresolved for that class even when the
# setter is inherited (an interface's setter walks each class's own language model), so it is
# reported on the registered class. The other kinds are about the setter's own body: reported
# once, on the class that defines it.
_OWN = frozenset({ProblemKind.DELEGATE_UNRESOLVED, ProblemKind.HOLDER_UNRESOLVED})


class UnresolvedCapture(Rule):
    code = "FT017"
    name = "unresolved-capture"
    consequence = None  # a capability note: info
    summary = "A capture path could not be decided statically (unknown capture point or missing registry target)."
    rationale = (
        "Where the analysis cannot decide, it says so instead of guessing; `flowtrace probe capture` settles such cases"
        " on tensors."
    )
    fix = "Run `flowtrace probe capture` for this model, or simplify the capture so it can be read statically."
    valid = (
        Example(
            module(
                """\
class ExDecoderLayer(Module):
    def forward(self, hidden_states, residual, capture_output=None):
        if capture_output is not None:
            capture_output(hidden_states)
        hidden_states = hidden_states * 2
        return hidden_states, residual
""",
                """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([ExDecoderLayer() for _ in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](
                hidden_states, residual, capture_output=aux_hidden_states.append if i in self.layers_to_capture else None
            )
        return hidden_states, aux_hidden_states
""",  # noqa: E501 (the example renders verbatim in docs/rules.md)
                causal_lm(),
            ),
            "a keyword callback is followed into the layer",
        ),
    )
    invalid = (
        Example(
            module(
                """\
class ExDecoderLayer(Module):
    def forward(self, hidden_states, residual, capture_output=None):
        if capture_output is not None:
            capture_output(hidden_states)
        hidden_states = hidden_states * 2
        return hidden_states, residual
""",
                """\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([ExDecoderLayer() for _ in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](
                hidden_states, residual, aux_hidden_states.append if i in self.layers_to_capture else None
            )
        return hidden_states, aux_hidden_states
""",
                causal_lm(),
            ),
            "positional: cannot be followed",
            line=20,
            kind=ProblemKind.POINT_UNKNOWN,
            message="handed to layer i positionally",
            consequence=None,
            severity="info",
        ),
        Example(
            module(
                CAPTURING_MODEL,
                causal_lm(
                    "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
                    "        for i in layer_ids:\n"
                    '            self.model.record_outputs[f"layer_{i}"] = True\n'
                ),
            ),
            "the setter records its ids under another attribute (output hooks, say): not decided statically",
            line=35,
            kind=ProblemKind.SETTER_WRITES_NOTHING,
            message="the setter writes no capture attribute named by the profile",
            consequence=None,
            severity="info",
        ),
    )

    def check(self, result: ScanResult) -> Iterator[Finding]:
        project = result.project
        for target, entries in sorted(project.lookup.registry.items()):
            if project.lookup.find_class(target) is None:
                e = entries[0]
                module, _, name = target.rpartition(".")
                places = sorted(q for q in project.lookup.by_name.get(name, []) if q.startswith(module + "."))
                if places:
                    message = (
                        f"registry entry {e.architecture!r} points at {target}; {name} is defined {len(places)} times"
                        f" below {module} ({', '.join(q.rpartition('.')[0] for q in places[:3])}) and the one that runs"
                        " is chosen at import time"
                    )
                else:
                    message = f"registry entry {e.architecture!r} points at {target}, which is not in the scanned tree"
                yield self.finding(e.location, message, target, target, kind=ProblemKind.REGISTRY_TARGET_MISSING)
        seen = set()
        for row in result.rows:
            chain = row.chain
            if chain is None or chain.source.kind != F.SourceKind.SETTER or not chain.transforms:
                continue
            entry = chain.transforms[0]
            own = entry.owner == row.qualname  # an inherited setter is reported on the class that defines it
            issue = next(
                (p for p in chain.problems if p.kind in _UNRESOLVED and (own or (row.registered and p.kind in _OWN))),
                None,
            )
            if issue is not None:
                where = issue.location or entry.location
                yield self.finding(
                    entry.location if own else row.location,
                    f"{row.name}: {issue.text} ({where})",
                    row.qualname,
                    issue.text,
                    kind=issue.kind,
                )
            site = chain.site
            if site is None or site.point != F.UNKNOWN or site.location in seen:
                continue
            seen.add(site.location)
            yield self.finding(
                site.location,
                f"{row.name}: capture point unknown at {site.location}: {site.note}",
                row.qualname,
                site.function,
                kind=ProblemKind.POINT_UNKNOWN,
                steps=(("setter", entry.location), ("capture site", site.location)),
            )
