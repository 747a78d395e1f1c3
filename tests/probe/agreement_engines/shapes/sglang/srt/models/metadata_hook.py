"""Shape: a metadata hook. Each layer calls
``spec_metadata.maybe_capture_hidden_states(self.layer_idx, hidden, residual)`` after its MLP,
so engine id i is the output of layer i (b=i+1); the ids are stored unchanged, -1 never matches.
The metadata object is built per forward from the model's capture attribute.
"""

from sglang.srt.layers.base import Compute, Module, ModuleList


class HookSpecMetadata:
    def __init__(self, layers_to_capture):
        self.layers_to_capture = layers_to_capture
        self.aux_hidden_states = []

    def maybe_capture_hidden_states(self, layer_idx, hidden_states, residual):
        if layer_idx in self.layers_to_capture:
            self.aux_hidden_states.append(hidden_states + residual)


class HookDecoderLayer(Module):
    def __init__(self, layer_idx):
        self.layer_idx = layer_idx
        self.mlp = Compute()

    def forward(self, hidden_states, residual, spec_metadata=None):
        residual = hidden_states if residual is None else hidden_states + residual
        hidden_states = self.mlp(residual)
        if spec_metadata is not None:
            spec_metadata.maybe_capture_hidden_states(self.layer_idx, hidden_states, residual)
        return hidden_states, residual


class HookModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([HookDecoderLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = ()

    def forward(self, input_ids, hidden_states):
        spec_metadata = HookSpecMetadata(self.layers_to_capture)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(hidden_states, residual, spec_metadata=spec_metadata)
        return hidden_states, spec_metadata.aux_hidden_states


class HookForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = HookModel(config)

    def forward(self, input_ids, hidden_states):
        return self.model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            n = self.config.num_hidden_layers
            layer_ids = (2, n // 2, n - 3)
        self.model.layers_to_capture = tuple(layer_ids)


EntryClass = HookForCausalLM
