"""A torch engine whose source misleads a static reading (probe fixture).

The layer hands ``capture_output`` to its boundary object before any compute, which reads
statically as "records the layer's input". But the boundary only *stores* the callback and
fires it in ``finish`` on the layer's output: at runtime the engine captures outputs, one
boundary later than the static trace says. The probe must report that as refuted.
"""

import torch
from torch import nn

H, L, V, T = 16, 6, 32, 12


class AuxHiddenStateList(list):
    def capture(self, t):
        self.append(t)


class DeferredBoundary:
    """Remembers the capture callback at the layer's entry and calls it at the exit."""

    def __init__(self):
        self.pending = None

    def prepare(self, hidden_states, residual, capture=None):
        self.pending = capture
        return hidden_states if residual is None else hidden_states + residual

    def finish(self, hidden_states, residual):
        if self.pending is not None:
            self.pending(hidden_states + residual)
            self.pending = None
        return hidden_states, residual


class MirageDecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.boundary = DeferredBoundary()
        self.mlp = nn.Linear(H, H)

    def forward(self, hidden_states, residual, capture_output=None):
        residual = self.boundary.prepare(hidden_states, residual, capture=capture_output)
        hidden_states = self.mlp(residual)
        return self.boundary.finish(hidden_states, residual)


class MirageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList(MirageDecoderLayer() for _ in range(L))
        self.start_layer, self.end_layer = 0, L
        self.layers_to_capture = []

    def forward(self, input_ids):
        hidden_states, residual = self.embed_tokens(input_ids), None
        aux_hidden_states = AuxHiddenStateList()
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](
                hidden_states,
                residual,
                capture_output=aux_hidden_states.capture if i in self.layers_to_capture else None,
            )
        return hidden_states + residual, aux_hidden_states


class MirageForCausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = MirageModel()

    def forward(self, input_ids):
        return self.model(input_ids)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            layer_ids = [1, 2, 3]
        self.model.layers_to_capture = [val + 1 for val in layer_ids]


EntryClass = MirageForCausalLM


def make_mirage(layer_ids=(0, 2, 4), seed: int = 7):
    torch.manual_seed(seed)
    model = MirageForCausalLM().eval()
    model.set_eagle3_layers_to_capture(list(layer_ids))
    return model, {"input_ids": torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(seed))}
