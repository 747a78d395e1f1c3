"""Shape: a buffer slice copy. The forward preallocates one slot per capture index and, after
layer i, copies ``hidden_states + residual`` (the layer's output stream, b=i+1) into the next
free slot when ``i`` is a capture index (tested through a ``frozenset`` alias of the attribute);
it returns the filled slots as a tuple. The ids are stored unchanged: -1 never matches, 99
fills no slot (only the filled slots are returned)."""

from sglang.srt.layers.base import Module, ModuleList, SplitLayer


class BufferCopyModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([SplitLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        wanted = frozenset(self.layers_to_capture)
        buf = hidden_states.new_empty((len(wanted),) + tuple(hidden_states.shape))
        k = 0
        for i, layer in enumerate(self.layers):
            hidden_states, residual = layer(hidden_states, residual)
            if i in wanted:
                buf[k].copy_(hidden_states + residual)
                k += 1
        return hidden_states, tuple(buf[:k])


class BufferCopyForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = BufferCopyModel(config)

    def forward(self, input_ids, hidden_states):
        return self.model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            n = self.config.num_hidden_layers
            layer_ids = [2, n // 2, n - 3]
        self.model.layers_to_capture = list(layer_ids)


EntryClass = BufferCopyForCausalLM
