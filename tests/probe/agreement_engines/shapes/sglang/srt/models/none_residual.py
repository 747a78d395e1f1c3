"""Shape: a ``None`` residual at index 0. The loop records ``hidden_states + residual`` before
layer i while ``residual`` is still ``None`` before layer 0, so asking for the embedding (id -1,
which the setter turns into index 0) raises a TypeError; every other index records b=i."""

from sglang.srt.layers.base import Module, ModuleList, SplitLayer


class NoneResidualModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([SplitLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(len(self.layers)):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        return hidden_states, aux_hidden_states


class NoneResidualForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = NoneResidualModel(config)

    def forward(self, input_ids, hidden_states):
        return self.model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            n = self.config.num_hidden_layers
            layer_ids = [1, n // 2 - 1, n - 4]
        self.model.layers_to_capture = [i + 1 for i in layer_ids]


EntryClass = NoneResidualForCausalLM
