"""Stand-ins for torch.nn so this fixture imports without torch (the probe's runtime supplies torch)."""


class Module:
    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


class ModuleList(list):
    pass


class Compute(Module):
    """A layer's attention/MLP stand-in: the probe's runtime puts real compute in its place."""

    def forward(self, hidden_states):
        return hidden_states


class SplitLayer(Module):
    """A split-residual decoder layer: adds the residual, computes, returns (hidden, residual)."""

    def __init__(self, layer_idx=0):
        self.layer_idx = layer_idx
        self.mlp = Compute()

    def forward(self, hidden_states, residual):
        residual = hidden_states if residual is None else hidden_states + residual
        return self.mlp(residual), residual
