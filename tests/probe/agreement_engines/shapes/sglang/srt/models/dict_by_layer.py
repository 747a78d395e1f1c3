"""Shape: a dict keyed by layer, read back in config order. The loop stores the stream before
layer i (b=i) under key i; the model returns the states in the order the ids were given, not
in loop order. The setter adds one (engine id i = b=i+1, -1 = embedding)."""

from sglang.srt.layers.base import Module, ModuleList, SplitLayer


class DictModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([SplitLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        by_layer = {}
        for i in range(len(self.layers)):
            if i in self.layers_to_capture:
                by_layer[i] = hidden_states if residual is None else hidden_states + residual
            hidden_states, residual = self.layers[i](hidden_states, residual)
        return hidden_states, [by_layer[i] for i in self.layers_to_capture if i in by_layer]


class DictForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = DictModel(config)

    def forward(self, input_ids, hidden_states):
        return self.model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            n = self.config.num_hidden_layers
            layer_ids = [1, n // 2 - 1, n - 4]
        self.model.layers_to_capture = [i + 1 for i in layer_ids]


EntryClass = DictForCausalLM
