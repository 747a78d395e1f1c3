"""The shared scaffold of the rules' VALID / INVALID examples.

Most examples are one engine model file in which a single detail differs from the engine's
usual shape: a setter that does not add one, a forward that drops the states, a residual that
is still ``None``. Writing the usual parts once here keeps each example down to the detail it
is about (and keeps the parts identical across rules, so an example's line numbers are read
from the same text). The examples are SGLang-shaped: ``Module`` and ``ModuleList`` come from the
header the test harness writes above the code (``tests/test_rule_examples.py``).
"""

from __future__ import annotations

PLUS_ONE = "[val + 1 for val in layer_ids]"  # the engine's usual id transform (capture before layer i)

CAPTURING_MODEL = '''\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = self.layers[i](hidden_states, residual)
        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states
'''
"""The inner model as the engine writes it: capture before layer i, residual guarded at index 0
(lines 10-12: the loop, the membership test, the append)."""

PLAIN_CAPTURING_MODEL = '''\
class ExModel(Module):
    def __init__(self, config):
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        self.layers = ModuleList([])
        self.layers_to_capture = []

    def forward(self, input_ids, hidden_states):
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        return hidden_states, aux_hidden_states
'''
"""An inner model whose layers return one tensor (no split residual); the append is line 11."""

_WRAPPER_HEAD = '''\
class ExForCausalLM(Module):
    def __init__(self, config):
        self.config = config
        self.model = ExModel(config)
        self.capture_aux_hidden_states = False

    def forward(self, input_ids, hidden_states):
        out = self.model(input_ids, hidden_states)
        if self.capture_aux_hidden_states:
            hidden_states, aux = out
            return hidden_states, aux
        return out

    def get_embed_and_head(self):
        return None, None

'''
_ENTRY = "\nEntryClass = ExForCausalLM\n"


def setter(transform: str = PLUS_ONE, *, sets_flag: bool = True) -> str:
    """The EAGLE-3 setter: the engine's default layers when the draft names none, else
    ``transform`` of the draft's ids; ``sets_flag=False`` leaves the capture flag off."""
    flag = "        self.capture_aux_hidden_states = True\n" if sets_flag else ""
    return (
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
        f"{flag}"
        "        if layer_ids is None:\n"
        "            num_layers = self.config.num_hidden_layers\n"
        "            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]\n"
        "        else:\n"
        f"            self.model.layers_to_capture = {transform}\n"
    )


def causal_lm(setter_method: str | None = None) -> str:
    """The registered wrapper around ``ExModel``: builds it, unpacks the aux states when the
    flag is on, and defines ``setter_method`` (default :func:`setter`); with a default setter the
    ``def set_eagle3_layers_to_capture`` line is line 17 of this block (line 35 of
    ``module(CAPTURING_MODEL, causal_lm())``)."""
    return _WRAPPER_HEAD + (setter() if setter_method is None else setter_method) + _ENTRY


def module(*blocks: str) -> str:
    """Top-level blocks, each ending in a newline, two blank lines apart (as in engine code)."""
    return "\n\n".join(blocks)
