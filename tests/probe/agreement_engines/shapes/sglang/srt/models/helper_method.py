"""Shape: a helper method, named in no profile, records the stream under a membership test.

``self._keep(aux, label, hidden, residual)`` is called before layer i with label i (the layer's
input: b=i) and once after the loop with label L (b=L). The setter adds one to each id, so
engine id i is the output of layer i (b=i+1) and -1 the embedding (b=0).
"""

from sglang.srt.layers.base import Module, ModuleList, SplitLayer


class HelperModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([SplitLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def _keep(self, aux, label, hidden_states, residual):
        if label in self.layers_to_capture:
            aux.append(hidden_states if residual is None else hidden_states + residual)

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i, layer in enumerate(self.layers):
            self._keep(aux_hidden_states, i, hidden_states, residual)
            hidden_states, residual = layer(hidden_states, residual)
        self._keep(aux_hidden_states, len(self.layers), hidden_states, residual)
        return hidden_states, aux_hidden_states


class HelperForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = HelperModel(config)

    def forward(self, input_ids, hidden_states):
        return self.model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            n = self.config.num_hidden_layers
            layer_ids = [1, n // 2 - 1, n - 4]
        self.model.layers_to_capture = [i + 1 for i in layer_ids]


EntryClass = HelperForCausalLM
