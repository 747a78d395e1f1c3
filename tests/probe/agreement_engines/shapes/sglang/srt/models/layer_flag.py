"""Shape: the inner setter marks the chosen layers by indexing the layer list with each id
(``setattr(self.layers[i], flag, True)``, line 18) and the loop reads the mark back from the
layer (line 25) before it runs, recording the stream before layer i (b=i). An id >= L raises
IndexError at line 18; a negative id k marks layer L + k, as Python indexes a list from the
end, so it is captured as b = L + k. The ids are stored unchanged."""

from sglang.srt.layers.base import Module, ModuleList, SplitLayer


class FlagModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([SplitLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def set_eagle3_layers_to_capture(self, layers_to_capture):
        self.layers_to_capture = layers_to_capture
        for layer_id in self.layers_to_capture:
            setattr(self.layers[layer_id], "_keep_input", True)

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(len(self.layers)):
            layer = self.layers[i]
            if getattr(layer, "_keep_input", False):
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = layer(hidden_states, residual)
        return hidden_states, aux_hidden_states


class FlagForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = FlagModel(config)

    def forward(self, input_ids, hidden_states):
        return self.model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            n = self.config.num_hidden_layers
            layer_ids = [2, n // 2, n - 3]
        self.model.set_eagle3_layers_to_capture(list(layer_ids))


EntryClass = FlagForCausalLM
