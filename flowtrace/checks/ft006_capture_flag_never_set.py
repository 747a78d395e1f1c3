"""FT006 capture-flag-never-set: the forward only returns captured states when a flag is on, and the setter never turns it on."""

from __future__ import annotations

from typing import Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.facts import ProblemKind, ReturnKind
from flowtrace.model.links import NOT_BREAKING


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
