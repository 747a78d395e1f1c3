"""Shape: layers that fold the residual in themselves. Each layer adds its input back after
its MLP and returns ``(hidden_states, residual)`` where ``hidden_states`` already is the
stream (``residual`` is only the layer's input, handed back unused). The loop records
``hidden_states`` alone after layer i with label i + 1: the stream at b=i+1, nothing is
missing. Plus-one ids: id i -> index i + 1 -> b = i + 1; index 0 is never met (no capture
before the loop), so id -1 is dropped."""

from sglang.srt.layers.base import Compute, Module, ModuleList


class FoldingDecoderLayer(Module):
    def __init__(self, layer_idx=0):
        self.layer_idx = layer_idx
        self.mlp = Compute()

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states, residual


class FoldedModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([FoldingDecoderLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        aux_hidden_states = []
        for i in range(len(self.layers)):
            hidden_states, residual = self.layers[i](hidden_states)
            if i + 1 in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
        return hidden_states, aux_hidden_states


class FoldedForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = FoldedModel(config)

    def forward(self, input_ids, hidden_states):
        return self.model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            n = self.config.num_hidden_layers
            layer_ids = [1, n // 2 - 1, n - 4]
        self.model.layers_to_capture = [i + 1 for i in layer_ids]


EntryClass = FoldedForCausalLM
