"""A small pure-PyTorch EAGLE-3 draft (one decoder layer) and its checkpoint loader.

Forward, for aux states ``a`` (``[T, n_aux * H_target]``) and next-token ids ``x``::

    g = fc(a)                                   # [T, H]
    h = hidden_norm(g); residual = g            # residual = h if norm_before_residual
    z = cat([input_layernorm(embed(x)), h], -1) # embeddings first: width 2H
    h = residual + self_attn(z)                 # q/k/v project from 2H
    h = h + mlp(post_attention_layernorm(h))
    logits = lm_head(norm(h))                   # draft vocabulary
    target_id = draft_id + d2t[draft_id]

Checkpoints name the layer ``midlayer.*`` (EAGLE, SpecForge) or ``layers.0.*`` (speculators);
both load. A missing ``embed_tokens.weight`` means the draft shares the target's embeddings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from flowtrace.probe.blocks import Attention, RMSNorm, SwiGLU
from flowtrace.probe.errors import INSTALL_HINT, MissingDependency, ProbeError


@dataclass(frozen=True, slots=True)
class DraftConfig:
    """The few config.json fields the draft forward needs, with EAGLE-3 defaults."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    n_aux: int
    rms_norm_eps: float = 1e-6
    rope_theta: float | None = 10000.0
    norm_before_residual: bool = False
    attention_bias: bool = False
    aux_layer_ids: tuple[int, ...] | None = None

    @property
    def config_boundaries(self) -> tuple[int, ...] | None:
        """Engine layer ids read as "output of layer i" = boundary i+1 (id -1 = embedding, b=0)."""
        if self.aux_layer_ids is None:
            return None
        return tuple(i + 1 for i in self.aux_layer_ids)

    def to_json_dict(self, architecture: str, model_type: str) -> dict[str, Any]:
        """A config.json an EAGLE-3 loader understands (used to write test/synthetic drafts);
        ``architecture`` / ``model_type`` name the engine's draft class (a profile's
        ``[probe] draft_architecture`` / ``draft_model_type``)."""
        d: dict[str, Any] = {
            "architectures": [architecture],
            "model_type": model_type,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": 1,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "target_hidden_size": self.target_hidden_size,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "norm_before_residual": self.norm_before_residual,
            "attention_bias": self.attention_bias,
        }
        if self.aux_layer_ids is not None:
            d["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(self.aux_layer_ids)}
        return d


class Eagle3DecoderLayer(nn.Module):
    """The single draft decoder layer; attention reads cat([embeds, hidden]) of width 2H."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.norm_before_residual = cfg.norm_before_residual
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.self_attn = Attention(
            2 * h, h, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
            cfg.rope_theta, bias=cfg.attention_bias,
        )
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.mlp = SwiGLU(h, cfg.intermediate_size)

    def forward(
        self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        normed = self.hidden_norm(hidden)
        residual = normed if self.norm_before_residual else hidden
        z = torch.cat([self.input_layernorm(embeds), normed], dim=-1)
        h = residual + self.self_attn(z, positions)
        out: torch.Tensor = h + self.mlp(self.post_attention_layernorm(h))
        return out


class Eagle3Draft(nn.Module):
    """EAGLE-3 draft: fc over n_aux target states, one layer, norm, lm_head over the draft vocab."""

    def __init__(self, cfg: DraftConfig, with_embeddings: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(cfg.n_aux * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = Eagle3DecoderLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.embed_tokens: nn.Module | None = (
            nn.Embedding(cfg.vocab_size, cfg.hidden_size) if with_embeddings else None
        )
        self.fc_norm: nn.ModuleList | None = None
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))

    def use_embeddings(self, embed: nn.Module) -> None:
        """Share the target's embeddings (drafts trained that way ship no embed_tokens)."""
        self.embed_tokens = embed

    def forward(
        self, input_ids: torch.Tensor, aux: torch.Tensor, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Draft logits ``[..., T, draft_vocab]`` for teacher-forced step 0."""
        if self.embed_tokens is None:
            raise ProbeError("the draft has no embed_tokens and no target embeddings were attached")
        if self.fc_norm is not None:
            chunks = torch.split(aux, self.cfg.target_hidden_size, dim=-1)
            aux = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks)], dim=-1)
        g = self.fc(aux)
        e = self.embed_tokens(input_ids).to(g.dtype)
        h = self.midlayer(e, g, positions)
        logits: torch.Tensor = self.lm_head(self.norm(h))
        return logits

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Map draft-vocab ids to target ids with the d2t offset table."""
        return draft_ids + self.d2t[draft_ids]  # type: ignore[index]  # a registered buffer


# --------------------------------------------------------------------------- loading


def _read_config(path: Path) -> dict[str, Any]:
    """The draft folder's config.json, read by the one config reader (flowtrace.sources.configs)."""
    from flowtrace.sources.configs import ConfigError, read_config

    if not (path / "config.json").is_file():
        raise ProbeError(f"draft {path}: no config.json (expected an EAGLE-3 checkpoint directory)")
    try:
        return read_config(path, "draft")
    except ConfigError as exc:
        raise ProbeError(f"draft {exc}") from None


def _read_weights(path: Path) -> tuple[dict[str, torch.Tensor], str]:
    st = path / "model.safetensors"
    idx = path / "model.safetensors.index.json"
    binf = path / "pytorch_model.bin"
    if st.is_file() or idx.is_file():
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise MissingDependency(
                f"draft {path}: reading .safetensors needs the safetensors package: pip install safetensors "
                f"(or {INSTALL_HINT.removeprefix('install ')})"
            ) from None
        if st.is_file():
            return dict(load_file(str(st))), st.name
        try:
            shards = sorted(set(json.loads(idx.read_text())["weight_map"].values()))
        except (OSError, KeyError, json.JSONDecodeError) as exc:
            raise ProbeError(f"draft {idx}: unreadable index ({exc})") from None
        out: dict[str, torch.Tensor] = {}
        for s in shards:
            out.update(load_file(str(path / s)))
        return out, idx.name
    if binf.is_file():
        try:
            sd = torch.load(str(binf), map_location="cpu", weights_only=True)
        except Exception as exc:
            raise ProbeError(f"draft {binf}: cannot load it: {type(exc).__name__}: {exc}") from None
        if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
            sd = sd["state_dict"]
        return dict(sd), binf.name
    raise ProbeError(
        f"draft {path}: no model.safetensors or pytorch_model.bin in the directory"
    )


def _normalise_keys(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``model.`` prefix dropped; ``layers.0.`` -> ``midlayer.``."""
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        nk = k[len("model."):] if k.startswith("model.") else k
        if nk.startswith("layers.0."):
            nk = "midlayer." + nk[len("layers.0."):]
        out[nk] = v
    return out


def _get_int(cfg: dict[str, Any], key: str, path: Path, default: int | None = None) -> int:
    v = cfg.get(key, default)
    if v is None:
        raise ProbeError(f"draft {path / 'config.json'}: missing key {key!r}")
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ProbeError(f"draft {path / 'config.json'}: key {key!r} must be an int, got {v!r}") from None


def aux_layer_ids_from_config(cfg: dict[str, Any]) -> tuple[int, ...] | None:
    """``eagle_aux_hidden_state_layer_ids`` from eagle_config or the top level, if present."""
    for holder in (cfg.get("eagle_config") or {}, cfg):
        ids = holder.get("eagle_aux_hidden_state_layer_ids") if isinstance(holder, dict) else None
        if ids:
            return tuple(int(i) for i in ids)
    return None


@dataclass(slots=True)
class LoadedDraft:
    module: Eagle3Draft
    config: DraftConfig
    path: str
    weights_file: str
    has_embeddings: bool
    warnings: list[str]


REQUIRED = (
    "fc.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.post_attention_layernorm.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "norm.weight",
    "lm_head.weight",
)


def load_draft(path: str | Path, target_hidden_size: int | None = None) -> LoadedDraft:
    """Read config.json + weights into an :class:`Eagle3Draft` (on CPU, float32)."""
    p = Path(path)
    if not p.is_dir():
        raise ProbeError(f"draft {path}: not a directory (give the checkpoint directory)")
    cfg = _read_config(p)
    raw, wfile = _read_weights(p)
    sd = _normalise_keys(raw)
    where = p / wfile
    _check_required_keys(raw, sd, where)
    hidden = _get_int(cfg, "hidden_size", p)
    heads = _get_int(cfg, "num_attention_heads", p)
    kv = _get_int(cfg, "num_key_value_heads", p, heads)
    head_dim = _get_int(cfg, "head_dim", p, hidden // heads if heads else None)
    inter = _get_int(cfg, "intermediate_size", p, sd["midlayer.mlp.gate_proj.weight"].shape[0])
    vocab = _get_int(cfg, "vocab_size", p)
    dvocab = _get_int(cfg, "draft_vocab_size", p, vocab)
    thid = _get_int(cfg, "target_hidden_size", p, hidden)
    if target_hidden_size is not None and "target_hidden_size" not in cfg:
        thid = target_hidden_size
    fc_in = sd["fc.weight"].shape[1] if sd["fc.weight"].dim() == 2 else -1
    if fc_in <= 0 or fc_in % thid:
        raise ProbeError(
            f"draft {where}: fc.weight has shape {tuple(sd['fc.weight'].shape)}; its input width "
            f"must be a multiple of the target hidden size {thid}"
        )
    rope_theta = cfg.get("rope_theta", 10000.0)
    dc = DraftConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        draft_vocab_size=dvocab,
        target_hidden_size=thid,
        n_aux=fc_in // thid,
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=None if rope_theta is None else float(rope_theta),
        norm_before_residual=bool(cfg.get("norm_before_residual", False)),
        attention_bias="midlayer.self_attn.q_proj.bias" in sd,
        aux_layer_ids=aux_layer_ids_from_config(cfg),
    )
    warnings: list[str] = []
    if cfg.get("rope_scaling"):
        warnings.append("rope_scaling in the draft config is ignored (plain RoPE); fine for short prompts")
    if dc.aux_layer_ids is not None and len(dc.aux_layer_ids) != dc.n_aux:
        warnings.append(
            f"eagle_aux_hidden_state_layer_ids has {len(dc.aux_layer_ids)} ids but fc takes "
            f"{dc.n_aux} aux states"
        )
    has_emb = "embed_tokens.weight" in sd
    # on the meta device: an 8B-class draft is ~0.4B parameters, not worth random-initialising
    # on the CPU only to overwrite them (load_state_dict(assign=True) below)
    with torch.device("meta"):
        module = Eagle3Draft(dc, with_embeddings=has_emb)
        if any(k.startswith("fc_norm.") for k in sd):
            module.fc_norm = nn.ModuleList(RMSNorm(thid, dc.rms_norm_eps) for _ in range(dc.n_aux))
    expected = module.state_dict()
    optional = {"d2t", "t2d"}
    _check_against_module(expected, sd, dc, where)
    unknown = sorted(k for k in sd if k not in expected and k not in optional)
    if unknown:
        warnings.append(f"ignored {len(unknown)} unknown checkpoint keys, e.g. {unknown[0]!r}")
    load = {k: v for k, v in sd.items() if k in expected}
    _set_d2t(load, dvocab, vocab, where)
    load = {k: (v.float() if v.is_floating_point() else v) for k, v in load.items()}
    module.load_state_dict(load, strict=True, assign=True)
    module.eval()
    return LoadedDraft(module, dc, str(p), wfile, has_emb, warnings)


def _check_required_keys(raw: dict[str, torch.Tensor], sd: dict[str, torch.Tensor], where: Path) -> None:
    """Refuse a checkpoint that lacks a key every EAGLE-3 draft has, or holds more than one
    decoder layer, before the config is read: these name the real problem better than a
    shape mismatch would."""
    missing = [k for k in REQUIRED if k not in sd]
    if missing:
        extra = "" if not any(k.startswith("layers.1.") for k in raw) else " (multi-layer drafts are not supported)"
        raise ProbeError(
            f"draft {where}: missing required key {missing[0]!r}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            + f"; keys may be named midlayer.* or layers.0.*{extra}"
        )
    if any(k.startswith("midlayer.") is False and k.startswith("layers.") for k in sd):
        raise ProbeError(f"draft {where}: has more than one decoder layer; multi-layer drafts are not supported")


def _check_against_module(
    expected: dict[str, torch.Tensor], sd: dict[str, torch.Tensor], dc: DraftConfig, where: Path
) -> None:
    """Every key the module built from config.json expects is in the checkpoint, with the
    same shape; the error names the config values the shape came from, since a wrong
    config is the usual cause. A missing d2t is allowed only when the vocabularies match."""
    for k, t in expected.items():
        if k not in sd:
            if k == "d2t":
                if dc.draft_vocab_size != dc.vocab_size:
                    raise ProbeError(
                        f"draft {where}: draft_vocab_size {dc.draft_vocab_size} != vocab_size {dc.vocab_size} but there"
                        " is no d2t table to map draft ids to target ids"
                    )
                continue
            raise ProbeError(f"draft {where}: missing key {k!r} (expected shape {tuple(t.shape)})")
        if tuple(sd[k].shape) != tuple(t.shape):
            raise ProbeError(
                f"draft {where}: {k} has shape {tuple(sd[k].shape)}, expected {tuple(t.shape)} "
                f"from config.json (hidden {dc.hidden_size}, heads {dc.num_attention_heads}x{dc.head_dim}, "
                f"kv heads {dc.num_key_value_heads}, intermediate {dc.intermediate_size}, "
                f"draft vocab {dc.draft_vocab_size}, {dc.n_aux} aux x {dc.target_hidden_size})"
            )


def _set_d2t(load: dict[str, torch.Tensor], dvocab: int, vocab: int, where: Path) -> None:
    """Put the draft-to-target id table in ``load`` as long ints: the checkpoint's, checked
    to land inside the target vocabulary, or all zeros (identity) when it has none."""
    if "d2t" in load:
        load["d2t"] = load["d2t"].to(torch.long)
        d2t = load["d2t"]
        tid = torch.arange(dvocab) + d2t
        if int(tid.min()) < 0 or int(tid.max()) >= vocab:
            raise ProbeError(
                f"draft {where}: d2t maps draft ids outside the target vocabulary 0..{vocab - 1} "
                "(expected target_id = draft_id + d2t[draft_id])"
            )
    else:
        load["d2t"] = torch.zeros(dvocab, dtype=torch.long)


def save_draft(
    module: Eagle3Draft,
    out_dir: str | Path,
    dtype: torch.dtype | None = None,
    include_embeddings: bool | None = None,
    layer_prefix: str = "midlayer.",
    engine: str | None = None,
) -> Path:
    """Write config.json + model.safetensors the way EAGLE-3 checkpoints are laid out.

    Used by tests and by the synthetic GPU check to produce drafts without any engine code; the
    config names the draft class of ``engine``'s profile (default: the one every ``[probe]`` profile names).
    """
    from flowtrace.probe.settings import draft_class

    architecture, model_type = draft_class(engine)
    try:
        from safetensors.torch import save_file
    except ImportError:
        raise MissingDependency("writing a draft needs safetensors: pip install safetensors") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = {}
    for k, v in module.state_dict().items():
        if k.startswith("embed_tokens.") and include_embeddings is False:
            continue
        if module.embed_tokens is None and k.startswith("embed_tokens."):
            continue
        nk = layer_prefix + k[len("midlayer."):] if k.startswith("midlayer.") else k
        t = v.detach().to("cpu")
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        sd[nk] = t.contiguous()
    save_file(sd, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(module.cfg.to_json_dict(architecture, model_type), indent=2) + "\n")
    return out
