"""Shape: a fixed-slot packer. The packer is sized by ``len(self.layers_to_capture)`` and its
``finalize()`` raises when fewer states arrived than slots (an id that never matches a layer).
The stream before layer i is packed (b=i); the ids are stored unchanged."""

from sglang.srt.layers.base import Module, ModuleList, SplitLayer


class FixedSlotPacker:
    def __init__(self, count):
        self.slots = [None] * count
        self.filled = 0

    def put(self, hidden_states):
        self.slots[self.filled] = hidden_states
        self.filled += 1

    def finalize(self):
        if self.filled != len(self.slots):
            raise RuntimeError(f"expected {len(self.slots)} aux hidden states, got {self.filled}")
        return self.slots


class SlotsModel(Module):
    def __init__(self, config):
        self.layers = ModuleList([SplitLayer(i) for i in range(config.num_hidden_layers)])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        packer = FixedSlotPacker(len(self.layers_to_capture))
        for i, layer in enumerate(self.layers):
            if i in self.layers_to_capture:
                packer.put(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = layer(hidden_states, residual)
        return hidden_states, packer.finalize()


class SlotsForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = SlotsModel(config)

    def forward(self, input_ids, hidden_states):
        return self.model(input_ids, hidden_states)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if layer_ids is None:
            n = self.config.num_hidden_layers
            layer_ids = [2, n // 2, n - 3]
        self.model.layers_to_capture = list(layer_ids)


EntryClass = SlotsForCausalLM
