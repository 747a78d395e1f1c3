"""Capture that happens on one path but not another, or captures the wrong tensor (FT006, FT012, FT013)."""

from __future__ import annotations

from typing import Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.checks.targets import conventions
from flowtrace.model.facts import ProblemKind, ReturnKind
from flowtrace.model.links import NOT_BREAKING
from flowtrace.index.stream_facts import FOLDS_RESIDUAL, SELF_CALLS


class CaptureFlagNeverSet(Rule):
    code = "FT006"
    name = "capture-flag-never-set"
    severity = "error"
    summary = "The forward only returns captured states when a flag is on, and the setter never turns it on."
    rationale = (
        "Engines gate the unpacking of (hidden, aux) on a flag such as capture_aux_hidden_states. A setter "
        "that writes the layer list but not the flag makes the model compute the captures and discard them."
    )
    kind = ProblemKind.FLAG_NEVER_SET
    fix = "Set the flag in the setter (as its siblings do) before writing the capture indices."
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
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExModel(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        out = self.model(input_ids, hidden_states)
        if self.capture_aux_hidden_states:
            hidden_states, aux = out
            return hidden_states, aux
        return out

    def get_embed_and_head(self):
        return None, None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]

EntryClass = ExForCausalLM
"""
        ),
    )
    invalid = (
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
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states


class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExModel(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        out = self.model(input_ids, hidden_states)
        if self.capture_aux_hidden_states:
            hidden_states, aux = out
            return hidden_states, aux
        return out

    def get_embed_and_head(self):
        return None, None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = [val + 1 for val in layer_ids]

EntryClass = ExForCausalLM
""", 'the setter never turns the flag on'
        ),
    )

    def check(self, result) -> Iterator[Finding]:
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
                        c.setter.location, f"{row.name}: {link.reason}", row.qualname, link.flag or "",
                        steps=(("setter", c.setter.location), *(("flag's value", e) for e in link.evidence), ("return without the states", link.location)),
                    )
                continue
            if row.chain.kinds() - NOT_BREAKING - {ProblemKind.RETURN_DROPPED}:
                continue  # a chain broken earlier is another rule's finding (selected on kinds)
            mro = set(project.mro(row.qualname))
            read = [u for u in uses if u.kind == "read" and u.class_qualname in mro and not u.function.split(".")[-1].startswith("set_")]
            if not read:
                continue
            setter_classes = {s.class_qualname for s in c.chain}
            written = [u for u in uses if u.kind == "write" and u.class_qualname in setter_classes | mro and u.function.split(".")[-1] in {s.method for s in c.chain}]
            if written:
                continue
            key = c.setter.location
            if key in seen:
                continue
            seen.add(key)
            yield self.finding(
                c.setter.location,
                f"{row.name}: {read[0].function} reads self.{read[0].attribute} to return the captured states ({read[0].location}), but {c.setter.method} never sets it",
                row.qualname,
                read[0].attribute,
                steps=(("setter", c.setter.location), ("flag read by the forward", read[0].location)),
            )


class CaptureSkippedOnPath(Rule):
    code = "FT012"
    name = "capture-skipped-on-path"
    severity = "warning"
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
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        project = result.project
        capturing = {q for q, sites in project.sites.items() if sites}
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
                if entry_points and loop.function.split(".")[-1] not in _reachable(project, loop.class_qualname, entry_points, calls):
                    continue  # no speculative entry point reaches this path
                owner = loop.class_qualname
                holder = owner if owner in capturing else related.get(owner)
                if holder is None or holder not in capturing:
                    continue
                site = project.sites[holder][0]
                yield self.finding(
                    loop.location,
                    f"{loop.function} ({loop.location}) runs the decoder layers while a draft is served, without the capture that {site.function} performs ({site.location})",
                    loop.class_qualname,
                    loop.function,
                    steps=(("path without capture", loop.location), ("capture site", site.location)),
                )


class CaptureWrongTensor(Rule):
    code = "FT013"
    name = "capture-wrong-tensor"
    severity = "warning"
    summary = "The captured tensor is not the residual stream: hidden_states without the residual, or a reference updated in place later."
    rationale = (
        "When layers return (hidden_states, residual), the residual stream at a boundary is their sum. "
        "Capturing hidden_states alone gives the draft only the last sub-layer's delta, a tensor it was "
        "never trained on."
    )
    kind = ProblemKind.RESIDUAL_MISSING
    fix = "Capture hidden_states + residual (or the helper that adds them), or clone() a tensor that is updated in place afterwards."
    valid = (
        Example(
            """\
class ExDecoderLayer(Module):
    def forward(self, hidden_states, residual):
        residual = hidden_states
        hidden_states = hidden_states * 2
        hidden_states = residual + hidden_states  # the layer adds the residual itself
        return hidden_states, residual


class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([ExDecoderLayer() for _ in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](hidden_states, residual)
            if i + 1 in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
        return hidden_states, aux_hidden_states
"""
        ),
    )
    invalid = (
        Example(
            """\
class ExDecoderLayer(Module):
    def forward(self, hidden_states, residual):
        residual = hidden_states if residual is None else hidden_states + residual
        return hidden_states * 2, residual  # a delta and the residual, apart


class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([ExDecoderLayer() for _ in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](hidden_states, residual)
            if i + 1 in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
        return hidden_states, aux_hidden_states
""", 'hidden_states alone is the delta'
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        folds = _folding_layers(result)
        for ff in result.files:
            for site in ff.capture_sites:
                if site.mutated_later:
                    yield self.finding(
                        site.location,
                        f"{site.function} stores a reference to `{site.captured_expression}` and later updates it in place "
                        f"(`{site.mutated_later}`): the captured state changes after it was recorded",
                        site.class_qualname,
                        f"{site.captured_expression}:{site.mutated_later}",
                    )
                    continue
                expr = site.captured_expression
                if not site.split_residual or not expr or site.uses_residual:
                    continue
                module = site.class_qualname.rpartition(".")[0]
                if any(o.uses_residual and o.function == site.function and o.loop_range == site.loop_range for o in ff.capture_sites):
                    continue  # `h if residual is None else h + residual` written as two branches
                if folds.get(module):
                    continue  # the layers add the residual themselves: their first output is the stream
                yield self.finding(
                    site.location,
                    f"{site.function} captures `{expr}` ({site.location}) although its layers return (hidden_states, residual) "
                    f"and none of them adds the residual itself: the residual is missing",
                    site.class_qualname,
                    expr,
                )


def _self_calls(result) -> dict[str, dict[str, set[str]]]:
    """Class -> method -> the methods it calls on self (stream facts)."""
    out: dict[str, dict[str, set[str]]] = {}
    for ff in result.files:
        for fact in ff.stream_facts:
            if fact.kind == SELF_CALLS:
                out.setdefault(fact.class_qualname, {})[fact.function.split(".")[-1]] = set(fact.detail.split(","))
    return out


def _reachable(project, qualname: str, entry_points: set[str], calls) -> set[str]:
    """Methods of the class (its own or inherited) that the entry points reach through self calls."""
    table: dict[str, set[str]] = {}
    for q in reversed(project.mro(qualname)):  # the class's own methods override its bases'
        table.update(calls.get(q, {}))
    seen, todo = set(entry_points), list(entry_points)
    while todo:
        for callee in table.get(todo.pop(), ()):
            if callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return seen


def _folding_layers(result) -> dict[str, list]:
    """Module -> layer forwards that return the stream with the residual already added."""
    out: dict[str, list] = {}
    for ff in result.files:
        for fact in ff.stream_facts:
            if fact.kind == FOLDS_RESIDUAL:
                out.setdefault(fact.class_qualname.rpartition(".")[0], []).append(fact)
    return out
