"""A Llama-shaped pure-PyTorch target with random weights, built from a dict of sizes.

For checks at realistic size without downloading anything (``scripts/gpu_probe.sh`` uses the
``llama3-8b`` preset: hidden 4096, 32 layers, 32 heads, 8 KV heads, intermediate 14336, vocab
128256). It is written the way serving engines write Llama: split residual (layers take and
return ``(hidden, residual)``), a capture callback handed to layer i that records the layer's
INPUT stream, and ``set_eagle3_layers_to_capture(ids)`` storing ``id + 1`` (engine id i = output of
layer i = boundary i+1; -1 = the embedding). Use as a factory::

    flowtrace probe capture --factory flowtrace.probe.synthetic:llama \\
        --factory-arg preset=tiny --factory-arg 'aux_layer_ids=[-1,3,5]' --expect 0,4,6
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from flowtrace.probe.blocks import Attention, RMSNorm, SwiGLU
from flowtrace.probe.errors import ProbeError

# A factory's inputs: the keyword arguments of one forward of the model it returns.
Inputs = dict[str, torch.Tensor]

PRESETS: dict[str, dict[str, Any]] = {
    "llama3-8b": dict(
        hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=14336, vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5,
    ),
    "tiny": dict(
        hidden_size=64, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=128, rope_theta=10000.0, rms_norm_eps=1e-6,
    ),
}


@dataclass(frozen=True, slots=True)
class LlamaSizes:
    """The sizes that shape a Llama decoder; ``head_dim`` defaults to hidden / heads."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    head_dim: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LlamaSizes":
        names = {f.name for f in fields(cls)}
        missing = [n for n in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                               "intermediate_size", "vocab_size") if d.get(n) is None]
        if missing:
            raise ProbeError(f"synthetic Llama: missing size {missing[0]!r}")
        kw = {k: v for k, v in d.items() if k in names and v is not None}
        kw.setdefault("num_key_value_heads", kw["num_attention_heads"])
        return cls(**kw)

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


class SyntheticDecoderLayer(nn.Module):
    """Split-residual Llama layer; ``capture_output`` receives the input stream (hidden + residual)."""

    def __init__(self, s: LlamaSizes) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = Attention(
            s.hidden_size, s.hidden_size, s.num_attention_heads, s.num_key_value_heads, s.hd,
            s.rope_theta,
        )
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.mlp = SwiGLU(s.hidden_size, s.intermediate_size)

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
        capture_output: Callable[[torch.Tensor], None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        residual = hidden_states if residual is None else hidden_states + residual
        if capture_output is not None:
            capture_output(residual)
        residual = residual + self.self_attn(self.input_layernorm(residual), positions)
        return self.mlp(self.post_attention_layernorm(residual)), residual


class _AuxList(list[torch.Tensor]):
    def capture(self, t: torch.Tensor) -> None:
        self.append(t)


class SyntheticLlamaModel(nn.Module):
    def __init__(self, s: LlamaSizes, dtype: torch.dtype) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size).to(dtype)
        # one layer at a time in the target dtype: an 8B model never exists in float32
        self.layers = nn.ModuleList(SyntheticDecoderLayer(s).to(dtype) for _ in range(s.num_hidden_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps).to(dtype)
        self.layers_to_capture: list[int] = []

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, _AuxList]:
        h, residual = self.embed_tokens(input_ids), None
        aux = _AuxList()
        for i, layer in enumerate(self.layers):
            h, residual = layer(
                positions, h, residual,
                capture_output=aux.capture if i in self.layers_to_capture else None,
            )
        return self.norm(h + residual), aux


class SyntheticLlamaForCausalLM(nn.Module):
    def __init__(self, s: LlamaSizes, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.sizes = s
        self.model = SyntheticLlamaModel(s, dtype)
        self.lm_head = nn.Linear(s.hidden_size, s.vocab_size, bias=False).to(dtype)

    def set_eagle3_layers_to_capture(self, layer_ids: Sequence[int] | None = None) -> None:
        """Engine convention: id i is the output of layer i, i.e. the input of layer i+1."""
        L = self.sizes.num_hidden_layers
        if layer_ids is None:
            self.model.layers_to_capture = [2, L // 2, L - 3]
        else:
            self.model.layers_to_capture = [int(v) + 1 for v in layer_ids]

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, _AuxList]:
        if positions is None:
            positions = torch.arange(input_ids.shape[-1], device=input_ids.device)
        h, aux = self.model(input_ids, positions)
        logits = self.lm_head(h)
        return (logits, aux) if aux else logits


def _sizes(preset: str | dict[str, Any] | None, overrides: dict[str, Any]) -> LlamaSizes:
    if isinstance(preset, dict):
        base = dict(preset)
    else:
        if preset not in PRESETS:
            raise ProbeError(f"synthetic Llama: unknown preset {preset!r} (known: {', '.join(PRESETS)})")
        base = dict(PRESETS[preset])
    base.update(overrides)
    return LlamaSizes.from_dict(base)


def _dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return torch.float32
    named: torch.dtype = getattr(torch, str(dtype))  # a dtype's name: "bfloat16" is torch.bfloat16
    return named


def build(sizes: LlamaSizes, aux_layer_ids: Any = "default", device: Any = None,
          dtype: Any = None, seed: int = 0) -> SyntheticLlamaForCausalLM:
    """Random-init model built directly on ``device`` in ``dtype``."""
    torch.manual_seed(seed)
    dev = torch.device(device or "cpu")
    with torch.device(dev), torch.no_grad():
        model = SyntheticLlamaForCausalLM(sizes, _dtype(dtype))
    if aux_layer_ids == "default":
        model.set_eagle3_layers_to_capture(None)
    elif aux_layer_ids not in (None, "none"):
        model.set_eagle3_layers_to_capture(list(aux_layer_ids))
    return model.eval()


def llama(preset: str = "tiny", aux_layer_ids: Any = "default", tokens: int = 128, seed: int = 0,
          device: Any = None, dtype: Any = None, **sizes: Any) -> tuple[SyntheticLlamaForCausalLM, Inputs]:
    """Factory for ``--factory flowtrace.probe.synthetic:llama``.

    ``aux_layer_ids``: engine layer ids (list), ``"default"`` (EAGLE's {2, L//2, L-3} as
    boundaries) or ``"none"``. Extra keyword arguments override preset sizes.
    """
    s = _sizes(preset, sizes)
    model = build(s, aux_layer_ids, device, dtype, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    dev = torch.device(device or "cpu")
    ids = torch.randint(0, s.vocab_size, (int(tokens),), generator=gen).to(dev)
    return model, {"input_ids": ids, "positions": torch.arange(int(tokens), device=dev)}


def from_hf_config(config: str, aux_layer_ids: Any = "default", tokens: int = 128, seed: int = 0,
                   device: Any = None, dtype: Any = None) -> tuple[SyntheticLlamaForCausalLM, Inputs]:
    """A Llama-shaped stand-in for a Hugging Face config.json, without transformers.

    Only the sizes are taken; architecture details beyond Llama (qk-norm, biases, sliding windows,
    MoE) are not modelled, which is fine for checking where aux states are taken from.
    """
    p = Path(config)
    f = p / "config.json" if p.is_dir() else p
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ProbeError(f"--factory-arg config={config}: cannot read {f}: {exc}") from None
    if isinstance(d.get("text_config"), dict):
        d = {**d, **d["text_config"]}
    return llama(preset=d, aux_layer_ids=aux_layer_ids, tokens=tokens, seed=seed, device=device, dtype=dtype)


def write_random_draft(out_dir: str, preset: str = "tiny", n_aux: int = 3,
                       draft_vocab: int | None = None, aux_layer_ids: Sequence[int] | None = None,
                       device: Any = None, dtype: Any = "bfloat16", seed: int = 0) -> Path:
    """An untrained EAGLE-3 draft checkpoint shaped for a preset (no embeddings: shares the
    target's). Random weights: ``probe draft`` should report no clear winner; the point is timing."""
    from flowtrace.probe.draft import DraftConfig, Eagle3Draft, save_draft

    s = _sizes(preset, {})
    dv = draft_vocab or min(32000, s.vocab_size // 2)
    cfg = DraftConfig(
        hidden_size=s.hidden_size, num_attention_heads=s.num_attention_heads,
        num_key_value_heads=s.num_key_value_heads, head_dim=s.hd,
        intermediate_size=s.intermediate_size, vocab_size=s.vocab_size, draft_vocab_size=dv,
        target_hidden_size=s.hidden_size, n_aux=n_aux, rms_norm_eps=s.rms_norm_eps,
        rope_theta=s.rope_theta, aux_layer_ids=None if aux_layer_ids is None else tuple(aux_layer_ids),
    )
    torch.manual_seed(seed)
    with torch.device(torch.device(device or "cpu")), torch.no_grad():
        draft = Eagle3Draft(cfg, with_embeddings=False).to(_dtype(dtype))
        keep = torch.randperm(s.vocab_size)[:dv].sort().values
        draft.d2t.copy_(keep - torch.arange(dv))  # type: ignore[operator]  # a registered buffer
    return save_draft(draft, out_dir)
