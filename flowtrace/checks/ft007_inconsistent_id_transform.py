"""FT007 inconsistent-id-transform: a setter maps draft ids to capture indices differently from most of the engine's setters."""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model import facts as F
from flowtrace.model.facts import ProblemKind


def _own_setters(result):
    """Setters that assign capture indices themselves (not pure delegation, not the engine's interface)."""
    providers = result.project.conv.interfaces | result.project.conv.holders
    # A setter reached only through another setter receives already-mapped indices.
    chains = [(row, row.chain) for row in result.rows if row.capture is not None and row.chain is not None]
    inner = {(t.owner, t.method) for _, chain in chains for t in chain.transforms[1:]}
    inner -= {(chain.transforms[0].owner, chain.transforms[0].method) for row, chain in chains if row.registered}
    out = []
    for ff in result.files:
        for s in ff.setters:
            if s.class_qualname.rsplit(".", 1)[-1] in providers or s.id_transform == F.DELEGATES or s.parameter is None:
                continue
            if (s.class_qualname, s.method) in inner or not any(b.transform != "default" for b in s.branches):
                continue
            out.append(s)
    return out


class InconsistentIdTransform(Rule):
    code = "FT007"
    name = "inconsistent-id-transform"
    severity = "warning"
    summary = "A setter maps draft ids to capture indices differently from most of the engine's setters."
    rationale = (
        "One draft config is served by every model class of an engine. When most setters add one to "
        "explicit ids and a few use identity or a heuristic, the same draft is shifted by a layer on "
        "those classes and acceptance collapses without any error."
    )
    kind = ProblemKind.TRANSFORM_INCONSISTENT
    fix = "Use the engine's majority convention (named in the message), or document why this class differs."
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
""", "plus one, like the engine's other setters"
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
        self.capture_aux_hidden_states = True
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.model.layers_to_capture = list(layer_ids)

EntryClass = ExForCausalLM
""", "identity where the engine's other setters add one"
        ),
    )

    def check(self, result) -> Iterator[Finding]:
        setters = _own_setters(result)
        if len(setters) < 3:
            return
        counts = Counter(s.id_transform for s in setters)
        majority, n = counts.most_common(1)[0]
        if n * 2 <= len(setters):
            return
        for s in setters:
            if s.id_transform != majority:
                note = f" ({s.transform_note})" if s.transform_note else ""
                yield self.finding(
                    s.location,
                    f"{s.class_qualname.rsplit('.', 1)[-1]}.{s.method} uses {s.id_transform}{note}; {n} of {len(setters)} setters in this engine use {majority}",
                    f"{s.class_qualname}.{s.method}",
                    f"{s.id_transform}:{s.transform_note}",
                )
