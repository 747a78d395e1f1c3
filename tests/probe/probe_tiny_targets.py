"""Tiny, deterministic target models for the probe tests, one per way engines wire aux states.

Each factory returns ``(model, example_inputs)`` as ``flowtrace probe --factory`` expects. The
models are written here from scratch (not with flowtrace's own blocks) so the probe is tested
against code it did not write. Sizes: hidden 32, 5 layers, vocab 96.

* ``make_hf``         HF style: layers return a tensor; aux = concatenate(hidden_states[id + 1]).
* ``make_split``      vLLM style: layers take/return (hidden, residual) with in-place fused adds;
                      aux = hidden + residual at the input of chosen layers, joined by torch.cat.
* ``make_engine``     SGLang style: a capture callback handed to layer i (capture of its INPUT),
                      ``set_eagle3_layers_to_capture`` adds 1; returns (hidden, aux_list).
* ``make_engine_identity`` / ``make_engine_capture_output``: deliberately off by one.
* ``make_spec_wrapper``: target + EAGLE-3 draft; aux packed into a preallocated buffer with
                      ``copy_`` (no cat), visible only at the draft's ``fc``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

H, L, V, HEADS, T = 32, 5, 96, 4, 12


class Norm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(H, 3 * H, bias=False)
        self.out = nn.Linear(H, H, bias=False)

    def forward(self, x):
        x2 = x[None] if x.dim() == 2 else x  # engines pass flat [T, H]
        b, t, _ = x2.shape
        q, k, v = self.qkv(x2).view(b, t, 3, HEADS, H // HEADS).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, t, H)).reshape(x.shape)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(H, 2 * H, bias=False)
        self.down = nn.Linear(2 * H, H, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def _init(model: nn.Module, seed: int) -> nn.Module:
    """Deterministic weights whose layers change the stream a lot (boundaries stay distinct)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                std = 1.0 if "embed" in name else 1.0 / p.shape[1] ** 0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return model.eval()


def _ids(seed: int, t: int = T, flat: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, V, (t,), generator=g)
    return ids if flat else ids[None]


# --------------------------------------------------------------------------- 1. HF style


class HFLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = Norm(H), Norm(H)
        self.self_attn, self.mlp = Attn(), MLP()

    def forward(self, hidden_states, attention_mask=None, position_ids=None):
        h = hidden_states + self.self_attn(self.input_layernorm(hidden_states))
        return h + self.mlp(self.post_attention_layernorm(h))


class HFModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList(HFLayer() for _ in range(L))
        self.norm = Norm(H)

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        all_hidden = []
        for layer in self.layers:
            all_hidden.append(h)
            h = layer(h)
        pre_norm = h
        h = self.norm(h)
        all_hidden.append(h)  # as in transformers: the last entry is after the final norm
        return h, all_hidden, pre_norm


class HFStyleCausalLM(nn.Module):
    """``aux_ids`` are engine layer ids: hidden_states[id + 1] (SpecForge's reading)."""

    def __init__(self, aux_ids=None) -> None:
        super().__init__()
        self.model = HFModel()
        self.lm_head = nn.Linear(H, V, bias=False)
        self.aux_ids = None if aux_ids is None else list(aux_ids)

    def forward(self, input_ids):
        h, all_hidden, _ = self.model(input_ids)
        logits = self.lm_head(h)
        if self.aux_ids is None:
            return logits
        aux = torch.concatenate([all_hidden[i + 1] for i in self.aux_ids], axis=-1)
        return logits, aux

    @torch.no_grad()
    def boundaries(self, input_ids):
        """Reference streams b=0..L (pre-norm) for tests that train drafts."""
        h, all_hidden, pre_norm = self.model(input_ids)
        return torch.stack(all_hidden[:-1] + [pre_norm]), self.lm_head(h)


def make_hf(aux_ids=(-1, 1, 3), seed: int = 0):
    return _init(HFStyleCausalLM(aux_ids), seed), {"input_ids": _ids(seed)}


# --------------------------------------------------------------------------- 2. split residual


class SplitLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = Norm(H), Norm(H)
        self.self_attn, self.mlp = Attn(), MLP()

    def forward(self, positions, hidden_states, residual):
        if residual is None:
            residual = hidden_states.clone()
        else:
            residual.add_(hidden_states)  # fused add: overwrites the caller's buffer
        h = self.self_attn(self.input_layernorm(residual))
        residual.add_(h)
        return self.mlp(self.post_attention_layernorm(residual)), residual


class SplitModel(nn.Module):
    def __init__(self, aux_layers) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList(SplitLayer() for _ in range(L))
        self.norm = Norm(H)
        self.aux_hidden_state_layers = tuple(aux_layers)

    def forward(self, input_ids, positions):
        h, residual, aux = self.embed_tokens(input_ids), None, []
        for idx, layer in enumerate(self.layers):
            if idx in self.aux_hidden_state_layers:
                aux.append(h.clone() if residual is None else h + residual)
            h, residual = layer(positions, h, residual=residual)
        return self.norm(h + residual), aux


class SplitCausalLM(nn.Module):
    def __init__(self, aux_layers) -> None:
        super().__init__()
        self.model = SplitModel(aux_layers)
        self.lm_head = nn.Linear(H, V, bias=False)

    def forward(self, input_ids, positions):
        h, aux = self.model(input_ids, positions)
        return self.lm_head(h), torch.cat(aux, dim=-1)  # vLLM's combine_hidden_states


def make_split(aux_layers=(0, 2, 4), seed: int = 1):
    ids = _ids(seed, flat=True)
    return _init(SplitCausalLM(aux_layers), seed), (ids, torch.arange(ids.shape[0]))


# --------------------------------------------------------------------------- 3. engine style


class AuxHiddenStateList(list):
    def capture(self, t: torch.Tensor) -> None:
        self.append(t)


class EngineLayer(nn.Module):
    def __init__(self, capture_output: bool) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = Norm(H), Norm(H)
        self.self_attn, self.mlp = Attn(), MLP()
        self.capture_after = capture_output

    def forward(self, positions, hidden_states, residual, capture_output=None):
        if capture_output is not None and not self.capture_after:
            capture_output(hidden_states if residual is None else hidden_states + residual)
        residual = hidden_states if residual is None else hidden_states + residual
        h = self.self_attn(self.input_layernorm(residual))
        residual = residual + h
        h = self.mlp(self.post_attention_layernorm(residual))
        if capture_output is not None and self.capture_after:
            capture_output(h + residual)
        return h, residual


class EngineModel(nn.Module):
    def __init__(self, capture_output: bool) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList(EngineLayer(capture_output) for _ in range(L))
        self.norm = Norm(H)
        self.layers_to_capture: list[int] = []

    def forward(self, input_ids, positions):
        h, residual = self.embed_tokens(input_ids), None
        aux = AuxHiddenStateList()
        for i in range(len(self.layers)):
            h, residual = self.layers[i](
                positions, h, residual,
                capture_output=aux.capture if i in self.layers_to_capture else None,
            )
        h = self.norm(h + residual)
        return (h, aux) if aux else h


class EngineCausalLM(nn.Module):
    def __init__(self, plus_one: bool = True, capture_output: bool = False) -> None:
        super().__init__()
        self.model = EngineModel(capture_output)
        self.lm_head = nn.Linear(H, V, bias=False)
        self.plus_one = plus_one

    def set_eagle3_layers_to_capture(self, layer_ids):
        # "we plus 1 here because for the ith layer, it takes the output of the (i-1)th layer"
        self.model.layers_to_capture = [v + 1 for v in layer_ids] if self.plus_one else list(layer_ids)

    def forward(self, input_ids, positions):
        return self.model(input_ids, positions)


def _engine(plus_one: bool, capture_output: bool, layer_ids, seed: int):
    m = _init(EngineCausalLM(plus_one, capture_output), seed)
    m.set_eagle3_layers_to_capture(list(layer_ids))
    ids = _ids(seed, flat=True)
    return m, {"input_ids": ids, "positions": torch.arange(ids.shape[0])}


def make_engine(layer_ids=(-1, 1, 3), seed: int = 2):
    """Correct: engine ids -1, 1, 3 -> inputs of layers 0, 2, 4 -> boundaries 0, 2, 4."""
    return _engine(True, False, layer_ids, seed)


def make_engine_identity(layer_ids=(0, 2, 3), seed: int = 3):
    """Off by one: the setter forgets the +1, so ids 0, 2, 3 land on boundaries 0, 2, 3 (not 1, 3, 4)."""
    return _engine(False, False, layer_ids, seed)


def make_engine_capture_output(layer_ids=(0, 2, 3), seed: int = 4):
    """Off by one the other way: +1 AND capture of the layer OUTPUT: boundaries 2, 4, 5."""
    return _engine(True, True, layer_ids, seed)


# --------------------------------------------------------------------------- 4. target + draft


class SpecWrapper(nn.Module):
    """Target plus an EAGLE-3 draft fed through a preallocated buffer (copy_ into slices)."""

    def __init__(self, boundaries) -> None:
        super().__init__()
        from flowtrace.probe.draft import DraftConfig, Eagle3Draft

        self.target = HFStyleCausalLM(None)
        self.boundaries = list(boundaries)
        cfg = DraftConfig(
            hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=2, head_dim=H // HEADS,
            intermediate_size=2 * H, vocab_size=V, draft_vocab_size=V, target_hidden_size=H,
            n_aux=len(self.boundaries),
        )
        self.draft = Eagle3Draft(cfg)

    def forward(self, input_ids):
        h, all_hidden, pre_norm = self.target.model(input_ids)
        streams = all_hidden[:-1] + [pre_norm]
        t = input_ids.shape[-1]
        buf = torch.empty(t, len(self.boundaries) * H)
        for i, b in enumerate(self.boundaries):
            buf[:, i * H:(i + 1) * H].copy_(streams[b].reshape(t, H))
        logits = self.target.lm_head(h)
        draft_logits = self.draft(input_ids.reshape(1, t), buf[None])
        return logits, draft_logits


def make_spec_wrapper(boundaries=(1, 2, 5), seed: int = 5):
    return _init(SpecWrapper(boundaries), seed), {"input_ids": _ids(seed)}


# --------------------------------------------------------------------------- 5. learnable target


class RotateLayer(nn.Module):
    """HF-style layer (tensor in, tensor out) that rotates the residual stream.

    ``h + mix(h)`` with ``mix.weight = (R - I)^T`` for a random orthogonal R, so h -> h R: every
    boundary holds the token in a fresh encoding (adjacent boundaries are nearly orthogonal) and a
    draft reading the wrong boundary reads noise. The last layer instead adds a large rotated copy
    of the previous position, which makes the target's argmax at t+1 a function of token t: a
    draft can learn it, but only through the aux states of position t.
    """

    def __init__(self, previous_token: bool) -> None:
        super().__init__()
        self.mix = nn.Linear(H, H, bias=False)
        self.previous_token = previous_token

    def forward(self, hidden_states):
        if self.previous_token:
            prev = torch.cat([hidden_states[..., :1, :], hidden_states[..., :-1, :]], dim=-2)
            return hidden_states + 64.0 * self.mix(prev)
        return hidden_states + self.mix(hidden_states)


class RotateModel(nn.Module):
    def __init__(self, n_layers: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList(RotateLayer(i == n_layers - 1) for i in range(n_layers))
        self.norm = Norm(H)

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        streams = [h]
        for layer in self.layers:
            h = layer(h)
            streams.append(h)
        return self.norm(h), streams


class RotateCausalLM(nn.Module):
    def __init__(self, n_layers: int = 6) -> None:
        super().__init__()
        self.model = RotateModel(n_layers)
        self.lm_head = nn.Linear(H, V, bias=False)

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids)[0])

    @torch.no_grad()
    def boundaries(self, input_ids):
        """Reference streams ``[L+1, ..., H]`` (b=0..L, pre-norm) and logits."""
        h, streams = self.model(input_ids)
        return torch.stack(streams), self.lm_head(h)


def make_learnable(n_layers: int = 6, seed: int = 7):
    """6 rotating layers, HF style; see :class:`RotateLayer` for why the argmax is learnable."""
    g = torch.Generator().manual_seed(seed)
    model = RotateCausalLM(n_layers)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.randn(V, H, generator=g))
        for layer in model.model.layers:
            r, _ = torch.linalg.qr(torch.randn(H, H, generator=g))
            w = r.T if layer.previous_token else (r - torch.eye(H)).T
            layer.mix.weight.copy_(w)
        model.lm_head.weight.copy_(torch.randn(V, H, generator=g))
    return model.eval(), {"input_ids": _ids(seed, t=24)}
