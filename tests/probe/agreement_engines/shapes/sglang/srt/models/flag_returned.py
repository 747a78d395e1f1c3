"""Shape: the capture flag is handed to the layer as a keyword
(``capture_input=idx in self.layers_to_capture``); the layer returns its input stream when
flagged and None otherwise; a helper method the forward calls runs the loop and stores what
comes back in the caller's dict by layer (``if kept is not None: by_layer[idx] = kept``); the
forward reads the dict back in config order. Layer idx returns h + r before its MLP: b=idx
(idx=0: the embedding, the residual still None). The setter adds one (engine id i = b=i+1,
-1 = embedding). Nothing records after the loop: b=L is never captured."""

from sglang.srt.layers.base import Compute, Module, ModuleList


def fold(hidden_states, residual, keep=False):
    stream = hidden_states if residual is None else hidden_states + residual
    return stream, (stream if keep else None)


class ReturningLayer(Module):
    def __init__(self, layer_idx=0):
        self.layer_idx = layer_idx
        self.mlp = Compute()

    def forward(self, hidden_states, residual, capture_input=False):
        residual, kept = fold(hidden_states, residual, keep=capture_input)
        return self.mlp(residual), residual, kept


class FlagReturnModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([ReturningLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        by_layer: dict[int, object] = {}
        hidden_states = self._run_layers(range(len(self.layers)), hidden_states, by_layer)
        return hidden_states, [by_layer[i] for i in self.layers_to_capture if i in by_layer]

    def _run_layers(self, layer_ids, hidden_states, by_layer: dict[int, object]):
        residual = None
        for idx in layer_ids:
            hidden_states, residual, kept = self.layers[idx](hidden_states, residual, capture_input=idx in self.layers_to_capture)
            if kept is not None:
                by_layer[idx] = kept
        return hidden_states


class FlagReturnForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = FlagReturnModel(config)

    def forward(self, input_ids, hidden_states):
        return self.model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            n = self.config.num_hidden_layers
            layer_ids = [1, n // 2 - 1, n - 4]
        self.model.layers_to_capture = [i + 1 for i in layer_ids]


EntryClass = FlagReturnForCausalLM
