"""Runs inside the *engine's* venv (``python engine_runner.py SPEC.json OUT.json``), never in flowtrace's.

``flowtrace probe engine`` starts this file with the engine venv's interpreter, so it may import
only the standard library, torch and what the engine itself installs (transformers, safetensors,
tokenizers): never flowtrace, whose analysis stays on the other side of the process boundary. It
names no engine: the spec's ``probe`` block (the engine profile's ``[probe]`` table) says which
package to look for, which environment to set and which **engine runner script** to load, a file
shipped next to the profile that is the only code calling the engine's own Python API. That script
defines ``start(ctx)``, ``install(engine)``, ``set_ids(engine, mode, ids, key)``,
``generate(engine, prompt, tokens)`` and ``observe(engine)``; it finds this module as its ``core``
attribute and uses :func:`record_stack`, :func:`record_fc` (or :func:`record_fc_input`) and
:func:`observe` on the worker side. A script whose engine stays usable after a raise in one case
because every case is a fresh engine start says so with ``starts_per_case = True``: each case's
plumbing then reads as run at load, and the cases after a raise run in the same process.

What happens, for one target architecture and several cases (id sets) in one engine process:

1. shrink the target config (few layers, small hidden size, heads the backend accepts) and build a
   random checkpoint of that architecture with transformers, plus a tiny random draft of the probed
   method whose config names the draft class of the profile (its layout and further keys too);
2. the runner script starts the engine once (draft loaded when any case has a draft config) and
   wraps the forward of the layer stack and of each decoder layer (a compile decorator may replace
   ``__call__``, so hooks would not fire), and the draft's fc entry;
3. per case: the script hands the ids to the engine (its own draft-config-to-setter plumbing, or
   its setter), generates a few tokens, and each captured tensor's boundary is named by matching it
   against the residual stream recorded at every boundary 0..L in the same forward.

The result is plain JSON; flowtrace compares it with its static trace.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, TypedDict

HIDDEN = 64
HEADS = 2
HEAD_DIM = 32  # the CPU attention backend accepts head sizes 32, 64, 80, ...
INTERMEDIATE = 128
VOCAB = 512
MAX_POS = 256
EXPERTS = 4
TOP_K = 2
MOE_INTERMEDIATE = 64
PROMPT = [5, 17, 99, 300, 42, 7, 250, 11]
REL_TOL = 1e-4  # matching tolerance, relative to the stream's magnitude

CAP: dict[str, Any] = {}


# ---- the JSON that crosses the process boundary ------------------------------------------------
# flowtrace writes a RunnerSpec, this file answers a RunnerResult. Typed here, in the one module
# both sides import (flowtrace for the types, the engine venv to run it), with stdlib TypedDicts:
# the engine venv's Python needs nothing more than ``typing``.


class _DraftClass(TypedDict):
    architectures: list[str]
    model_type: str


class DraftSpec(_DraftClass, total=False):
    """The profile's draft class of the probed method."""

    layout: str  # "midlayer" (EAGLE-3) or "layers" (DFlash-style): which weights draft_weights writes
    config: list[list[Any]]  # the method's further draft-config keys, as [dotted key, value] pairs


class _EngineSpec(TypedDict):
    engine: str
    package: str
    runner: str  # the engine runner script
    env: dict[str, str]
    draft: DraftSpec
    id_keys: list[str]


class EngineSpec(_EngineSpec, total=False):
    """The profile's ``[probe]`` table for one device: which engine to drive and how."""

    method: str  # the engine's own name of the probed method, when it is not the default


class CaseSpec(TypedDict):
    """One case: how the ids reach the engine (``draft``: its draft config; ``direct``: its setter)."""

    name: str
    mode: str
    ids: list[int] | None
    key: str | None
    fc_slots: int
    draft_layers: int


class _RunnerSpec(TypedDict):
    target_config: dict[str, Any]
    num_layers: int | None
    device: str
    workdir: str
    cases: list[CaseSpec]
    seed: int
    probe: EngineSpec


class RunnerSpec(_RunnerSpec, total=False):
    """What ``python engine_runner.py SPEC.json OUT.json`` reads from SPEC.json."""

    tokens: int  # tokens to generate per case (default 4)


# One change shrink_config made: {"key": "text_config.hidden_size", "from": 4096, "to": 64}
Shrink = TypedDict("Shrink", {"key": str, "from": Any, "to": Any})


class SlotRecord(TypedDict, total=False):
    """One captured state: the boundary whose stream it equals (None: none), or else the layer
    whose first output (without the residual) it equals."""

    boundary: int | None
    rel_err: float
    width: int
    layer_value_of: int | None


class FcSlotRecord(TypedDict):
    boundary: int | None
    rel_err: float


class FcInputRecord(TypedDict):
    """What reached the draft's fc: its width and each hidden-size chunk's boundary."""

    width: int
    slots: list[FcSlotRecord]
    calls: int


class Observed(TypedDict, total=False):
    """What :func:`observe` names for one case."""

    outcome: str  # captures / captures_nothing
    reason: str
    forwards: int
    num_boundaries: int
    slots: list[SlotRecord]
    fc_input: FcInputRecord


class EngineError(TypedDict):
    """Where the engine raised (see :func:`_engine_error`); ``outcome`` is ``raises``."""

    outcome: str
    raised_at: str | None
    raised_through: list[str]
    message: str


class CaseRecord(Observed, total=False):
    """One case as the runner saw it: the spec's fields, then what was observed or where it raised
    (the fields of an :class:`EngineError`)."""

    name: str
    mode: str
    ids: list[int] | None
    fc_slots: int
    plumbing: str  # "load": the engine's draft-config plumbing ran at start-up; "rerun": per case
    engine_layers: Any  # what the runner script's set_ids returns (the engine's own layer count, or None)
    raised_at: str | None
    raised_through: list[str]
    message: str
    seconds: float
    fc_width: Any  # what the runner script's install reports (the draft fc's input width, or None)


class RunnerResult(TypedDict, total=False):
    """What the runner writes to OUT.json: one engine process, every case it ran."""

    shrunk: list[Shrink]
    architecture: str | None
    cases: list[CaseRecord]
    engine_version: Any  # the runner script's version(): the engine's version string
    model_class: str
    num_layers: int
    stack_class: str
    load_seconds: float
    seconds: float
    peak_rss_mb: float
    build_error: str  # the random target could not be built: nothing else ran
    start_error: EngineError  # the engine refused the model at start-up: no case ran
    fatal_error: str  # the runner itself failed (with its traceback)
    traceback: str



# (keys, value): every key present (truthy) in the config is set to value
_SHRINKS: tuple[tuple[tuple[str, ...], Any], ...] = (
    (("num_experts", "num_local_experts", "n_routed_experts"), EXPERTS),
    (("num_experts_per_tok",), TOP_K),
    (("moe_intermediate_size", "shared_expert_intermediate_size"), MOE_INTERMEDIATE),
    (("n_shared_experts", "n_group", "topk_group", "first_k_dense_replace"), 1),
    (("q_lora_rank",), 64),
)
# multi-head latent attention: kv_lora_rank + qk_rope_head_dim must be 320, 512 or 576 (CPU MLA)
_LATENT = (("kv_lora_rank", 256), ("qk_nope_head_dim", 32), ("qk_rope_head_dim", 64), ("v_head_dim", 32))


def _shrink_layers(cfg: dict[str, Any], num_layers: int | None, put: Callable[[str, Any], None]) -> None:
    """Fewer layers; per-layer lists (layer types, window flags) follow the layer count."""
    orig_layers = cfg.get("num_hidden_layers")
    layers = num_layers or min(orig_layers or 4, 4)
    put("num_hidden_layers", layers)
    for key, value in list(cfg.items()):
        if isinstance(value, list) and orig_layers and len(value) == orig_layers and layers != orig_layers:
            put(key, value[:layers])


def _shrink_text(cfg: dict[str, Any], num_layers: int | None, prefix: str, shrunk: list[Shrink]) -> None:
    """Shrink one (text) config in place, recording every change as {key, from, to}."""

    def put(key: str, value: Any) -> None:
        if cfg.get(key, object()) != value:
            shrunk.append({"key": prefix + key, "from": cfg.get(key), "to": value})
            cfg[key] = value

    _shrink_layers(cfg, num_layers, put)
    kv, heads = cfg.get("num_key_value_heads"), cfg.get("num_attention_heads", HEADS)
    for key, value in (("hidden_size", HIDDEN), ("num_attention_heads", HEADS), ("head_dim", HEAD_DIM),
                       ("intermediate_size", INTERMEDIATE), ("vocab_size", VOCAB)):
        put(key, value)
    if kv is not None:  # grouped-query attention stays grouped
        put("num_key_value_heads", HEADS if kv >= heads else 1)
    if (cfg.get("max_position_embeddings") or 0) > MAX_POS:
        put("max_position_embeddings", MAX_POS)
    for keys, value in _SHRINKS:
        for key in keys:
            if cfg.get(key):
                put(key, value)
    if cfg.get("kv_lora_rank"):
        for key, value in _LATENT:
            put(key, value)
    for key in ("torch_dtype", "dtype"):
        if key in cfg:
            put(key, "float32")
    for key in ("quantization_config", "auto_map"):
        if key in cfg:
            shrunk.append({"key": prefix + key, "from": "(present)", "to": None})
            del cfg[key]


def shrink_config(cfg: dict[str, Any], num_layers: int | None) -> tuple[dict[str, Any], list[Shrink]]:
    """A tiny copy of the target config of the same architecture, and every change made."""
    cfg = json.loads(json.dumps(cfg))
    shrunk: list[Shrink] = []
    if isinstance(cfg.get("text_config"), dict):
        _shrink_text(cfg["text_config"], num_layers, "text_config.", shrunk)
        vision = cfg.get("vision_config")
        if isinstance(vision, dict):
            for key, value in (
                ("hidden_size", 64),
                ("intermediate_size", 128),
                ("num_hidden_layers", 1),
                ("depth", 1),
                ("num_attention_heads", 2),
                ("num_heads", 2),
                ("out_hidden_size", HIDDEN),
                ("head_dim", 32),
            ):
                if key in vision and vision[key] != value:
                    shrunk.append({"key": "vision_config." + key, "from": vision[key], "to": value})
                    vision[key] = value
            for key in ("image_size",):
                if (vision.get(key) or 0) > 56:
                    shrunk.append({"key": "vision_config." + key, "from": vision[key], "to": 56})
                    vision[key] = 56
            if "deepstack_visual_indexes" in vision:
                shrunk.append(
                    {
                        "key": "vision_config.deepstack_visual_indexes",
                        "from": vision["deepstack_visual_indexes"],
                        "to": [],
                    }
                )
                vision["deepstack_visual_indexes"] = []
        cfg["torch_dtype"] = "float32"
        for key in (
            "image_token_index",
            "image_token_id",
            "video_token_id",
            "vision_start_token_id",
            "vision_end_token_id",
        ):
            if isinstance(cfg.get(key), int) and cfg[key] >= VOCAB:  # special tokens inside the tiny vocabulary
                to = (
                    VOCAB
                    - 1
                    - len(
                        [
                            s
                            for s in shrunk
                            if s["key"]
                            in (
                                "image_token_index",
                                "image_token_id",
                                "video_token_id",
                                "vision_start_token_id",
                                "vision_end_token_id",
                            )
                        ]
                    )
                )
                shrunk.append({"key": key, "from": cfg[key], "to": to})
                cfg[key] = to
    else:
        _shrink_text(cfg, num_layers, "", shrunk)
    return cfg, shrunk


def text_part(cfg: dict[str, Any]) -> dict[str, Any]:
    text: dict[str, Any] = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    return text


def _tokenizer(folder: str) -> None:
    """A word-level tokenizer over the tiny vocabulary, so the engine needs nothing downloaded."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(VOCAB - len(vocab)):
        vocab[f"w{i}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    # transformers leaves the tokenizer's constructor unannotated; what it builds saves itself
    fast: Callable[..., Any] = PreTrainedTokenizerFast
    fast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(
        folder
    )


def build_target(cfg: dict[str, Any], folder: str, seed: int) -> None:
    """Random weights of the target's own architecture, saved the way its hub checkpoints are."""
    import torch
    import transformers

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    arch = (cfg.get("architectures") or [None])[0]
    cls = getattr(transformers, arch, None) if arch else None
    if cls is None:
        raise RuntimeError(
            f"transformers {transformers.__version__} has no class {arch!r} to build a random checkpoint from"
        )
    config = transformers.AutoConfig.from_pretrained(folder)
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32)
    with torch.no_grad():  # a residual stream that changes visibly from layer to layer
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2 if "embed" not in name else 1.0)
    model.save_pretrained(folder, safe_serialization=True)
    _tokenizer(folder)


def put_dotted(cfg: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted key (``a.b``) in a nested dict, creating the tables on the way."""
    *tables, last = key.split(".")
    for t in tables:
        cfg = cfg.setdefault(t, {})
    cfg[last] = value


# The draft-config keys a draft gets when the profile's method names none ([methods.*]
# probe_draft_config): what every EAGLE-3 draft config carries.
DEFAULT_DRAFT_EXTRA = (("eagle_config.use_aux_hidden_state", True),)
LAYOUTS = ("midlayer", "layers")


def draft_config(
    target: dict[str, Any], ids: list[int] | None, key: str | None, draft: DraftSpec, draft_layers: int = 1
) -> dict[str, Any]:
    """The draft's config.json: the profile's class (``draft``: ``architectures``, ``model_type``,
    and ``config``, its method's further keys as dotted pairs), the target's sizes, ``ids``
    exactly as given at ``key`` (nothing there for None)."""
    text = text_part(target)
    h, v = text["hidden_size"], text["vocab_size"]
    cfg: dict[str, Any] = {
        "architectures": list(draft["architectures"]), "model_type": draft["model_type"],
        "hidden_size": h, "intermediate_size": INTERMEDIATE, "num_hidden_layers": draft_layers,
        "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": h // HEADS,
        "vocab_size": v, "draft_vocab_size": v, "max_position_embeddings": MAX_POS,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "float32", "target_hidden_size": h,
        "bos_token_id": 1, "eos_token_id": 2,
    }
    extra = draft.get("config")
    for dotted, value in (DEFAULT_DRAFT_EXTRA if extra is None else [tuple(pair) for pair in extra]):
        put_dotted(cfg, dotted, value)
    if ids is not None:
        if key is None:
            raise ValueError("a draft case with ids needs the draft-config key to write them at")
        put_dotted(cfg, key, list(ids))
    return cfg


def draft_weights(layout: str, h: int, v: int, fc_slots: int, draft_layers: int, seed: int) -> dict[str, Any]:
    """Random draft weights under the checkpoint names the engine's draft class loads.

    ``midlayer``: an EAGLE-3 checkpoint, one layer whose attention reads embedding and state side
    by side (q/k/v of 2 x hidden) plus its own lm_head. ``layers``: a DFlash-style checkpoint, a
    stack of Qwen3 decoder layers (q/k norms) behind ``fc`` and ``hidden_norm``, no embedding and
    no lm_head (the engine shares the target's)."""
    import torch

    if layout not in LAYOUTS:
        raise ValueError(f"draft layout {layout!r}: the runner writes {', '.join(LAYOUTS)}")
    gen = torch.Generator().manual_seed(seed)
    inter, hd = INTERMEDIATE, h // HEADS

    def g(*shape: int) -> Any:
        return torch.randn(*shape, generator=gen) * 0.05

    def ones(n: int) -> Any:
        return torch.ones(n)

    sd = {"fc.weight": g(h, fc_slots * h), "norm.weight": ones(h)}
    if layout == "midlayer":
        sd.update({
            "midlayer.hidden_norm.weight": ones(h), "midlayer.input_layernorm.weight": ones(h),
            "midlayer.post_attention_layernorm.weight": ones(h),
            "midlayer.self_attn.q_proj.weight": g(h, 2 * h), "midlayer.self_attn.k_proj.weight": g(h, 2 * h),
            "midlayer.self_attn.v_proj.weight": g(h, 2 * h), "midlayer.self_attn.o_proj.weight": g(h, h),
            "midlayer.mlp.gate_proj.weight": g(inter, h), "midlayer.mlp.up_proj.weight": g(inter, h),
            "midlayer.mlp.down_proj.weight": g(h, inter), "lm_head.weight": g(v, h),
        })
        return sd
    sd["hidden_norm.weight"] = ones(h)
    for i in range(draft_layers):
        p = f"layers.{i}."
        sd.update({
            p + "input_layernorm.weight": ones(h), p + "post_attention_layernorm.weight": ones(h),
            p + "self_attn.q_proj.weight": g(HEADS * hd, h), p + "self_attn.k_proj.weight": g(HEADS * hd, h),
            p + "self_attn.v_proj.weight": g(HEADS * hd, h), p + "self_attn.o_proj.weight": g(h, HEADS * hd),
            p + "self_attn.q_norm.weight": ones(hd), p + "self_attn.k_norm.weight": ones(hd),
            p + "mlp.gate_proj.weight": g(inter, h), p + "mlp.up_proj.weight": g(inter, h),
            p + "mlp.down_proj.weight": g(h, inter),
        })
    return sd


def build_draft(target: dict[str, Any], folder: str, ids: list[int] | None, key: str | None, fc_slots: int, seed: int,
                draft: DraftSpec,
                draft_layers: int = 1) -> None:
    """A tiny random draft whose config carries ``ids`` exactly as given, at ``key``.

    ``draft`` (the profile's draft class for the probed method: ``architectures``, ``model_type``,
    ``layout`` and ``config``) makes the engine load it with its own draft class of that method;
    the weights follow that layout (:func:`draft_weights`; default ``midlayer``, EAGLE-3's)."""
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    cfg = draft_config(target, ids, key, draft, draft_layers)
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    sd = draft_weights(draft.get("layout") or "midlayer", cfg["hidden_size"], cfg["vocab_size"], fc_slots,
                       draft_layers, seed)
    save_file(sd, os.path.join(folder, "model.safetensors"))
    _tokenizer(folder)


# ---- inside the engine (the runner script calls these on the worker) ----------------------------


def _stream(h: Any, r: Any) -> Any:
    return (h + r if r is not None else h).detach().float().clone()


def record_stack(stack: Any, layers: Any, stream: Any = None) -> None:
    """Wrap instance forwards of the layer stack and each decoder layer (not hooks: a compile
    decorator may replace ``__call__``), recording the residual stream at every boundary and the
    aux states the stack returns as ``(hidden_states, aux)``: a list of states, or one packed
    tensor of them side by side.

    ``stream(args, out)`` (optional, from the runner script) reads the residual stream at a layer's
    entry (``out`` is None) or exit, given the layer's bound arguments, for an engine whose layers
    keep the residual outside their arguments and results; it may return None to fall back to
    ``hidden_states + residual`` read from the arguments and the returned pair."""
    import inspect

    CAP.update(forwards=[], fc_in=[], layer_log=[], stack=stack, stream=stream)
    fwd = stack.forward

    def stack_forward(*args: Any, **kw: Any) -> Any:
        CAP["layer_log"] = []
        out = fwd(*args, **kw)
        returned: Any = out[1] if isinstance(out, tuple) and len(out) == 2 else None
        aux: Any = None
        if isinstance(returned, (list, tuple)):
            aux = [t.detach().float().clone() for t in returned]
        elif _is_tensor(returned):
            aux = returned.detach().float().clone()  # packed: split by the stream's width when observed
        CAP["forwards"].append({"layers": CAP["layer_log"], "aux": aux})
        return out

    stack.forward = stack_forward
    for idx, layer in enumerate(layers):
        _wrap_layer(layer, idx, inspect)


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "detach") and hasattr(value, "shape")


def record_fc(owner: Any, method: str) -> None:
    """Wrap the draft's fc entry (``owner.<method>(h)``), recording the tensor the fc receives."""
    inner = getattr(owner, method)

    def wrapped(h: Any) -> Any:
        record_fc_input(h)
        return inner(h)

    setattr(owner, method, wrapped)


def record_fc_input(h: Any) -> None:
    """Record a tensor the engine hands to the draft's fc (for an engine whose handover to the
    draft is a value the runner script reads, rather than a method it can wrap)."""
    CAP["fc_in"].append(h.detach().float().clone())


def clear() -> None:
    """Forget what earlier cases recorded (the runner script calls it after handing new ids)."""
    CAP["forwards"].clear()
    CAP["fc_in"].clear()


def _wrap_layer(layer: Any, idx: int, inspect: Any) -> None:
    fwd = layer.forward
    sig = inspect.signature(fwd)

    def layer_forward(*args: Any, **kw: Any) -> Any:
        bound = sig.bind_partial(*args, **kw).arguments
        entry = {"idx": idx, "in": _entry_stream(bound)}
        out = fwd(*args, **kw)
        entry["out"] = _exit_stream(bound, out)
        first = out[0] if isinstance(out, tuple) and out else out
        entry["value"] = first.detach().float().clone() if _is_tensor(first) else None  # what it returns first
        CAP["layer_log"].append(entry)
        return out

    layer.forward = layer_forward


def _entry_stream(bound: dict[str, Any]) -> Any:
    reader = CAP.get("stream")
    seen = reader(bound, None) if reader else None
    if seen is not None:
        return seen.detach().float().clone()
    h, r = bound.get("hidden_states"), bound.get("residual")
    return _stream(h, r) if h is not None else None


def _exit_stream(bound: dict[str, Any], out: Any) -> Any:
    reader = CAP.get("stream")
    seen = reader(bound, out) if reader else None
    if seen is not None:
        return seen.detach().float().clone()
    if isinstance(out, tuple):
        return _stream(out[0], out[1] if len(out) > 1 else None)
    return _stream(out, None)


def _match(t: Any, streams: list[Any]) -> tuple[int | None, float]:
    best, best_err = None, math.inf
    for b, s in enumerate(streams):
        if s is None or s.shape != t.shape:
            continue
        err = float((t - s).abs().max()) / max(float(s.abs().max()), 1e-6)
        if err < best_err:
            best, best_err = b, err
    return (best if best_err <= REL_TOL else None), best_err


def _unpack(aux: Any, width: int) -> list[Any] | None:
    """The captured states one by one: a list as returned, a packed tensor cut into ``width`` columns."""
    if aux is None or isinstance(aux, list):
        return aux
    if aux.shape[-1] % width:
        return [aux]  # not a whole number of states: reported as one unmatched slot
    return [aux[..., i * width:(i + 1) * width] for i in range(aux.shape[-1] // width)]


def observe(worker: Any = None) -> Observed:
    """Name the boundary of every captured tensor of the first (prefill) forward, and of the fc input."""
    fwds = [f for f in CAP["forwards"] if f["layers"]]
    if not fwds:
        return {"outcome": "captures_nothing", "reason": "the target's layer stack never ran"}
    first = fwds[0]
    layers = sorted(first["layers"], key=lambda e: e["idx"])
    streams = [layers[0]["in"]] + [e["out"] for e in layers]  # boundary 0..L
    out: Observed = {"forwards": len(fwds), "num_boundaries": len(streams)}
    aux = _unpack(first["aux"], streams[0].shape[-1])
    if aux is None:
        out.update({"outcome": "captures_nothing", "slots": [], "reason": "the layer stack returned no aux states"})
    else:
        slots: list[SlotRecord] = []
        for t in aux:
            b, err = _match(t, streams)
            slot: SlotRecord = {"boundary": b, "rel_err": err, "width": int(t.shape[-1])}
            if b is None:  # not the stream: is it what a layer returned first (its output without the residual)?
                k, _ = _match(t, [e["value"] for e in layers])
                slot["layer_value_of"] = k
            slots.append(slot)
        out.update({"outcome": "captures" if slots else "captures_nothing", "slots": slots})
    if CAP["fc_in"]:
        x = CAP["fc_in"][0]
        h = streams[0].shape[-1]
        n = x.shape[0]
        chunks = [x[:, i * h:(i + 1) * h] for i in range(x.shape[-1] // h)] if x.shape[-1] % h == 0 else []
        fc_slots: list[FcSlotRecord] = []
        for c in chunks:
            b, err = _match(c, [s[:n] if s is not None and s.shape[0] >= n else None for s in streams])
            fc_slots.append({"boundary": b, "rel_err": err})
        out["fc_input"] = {"width": int(x.shape[-1]), "slots": fc_slots, "calls": len(CAP["fc_in"])}
    return out


# ---- driver --------------------------------------------------------------------------------------


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _engine_error(exc: BaseException, package: str) -> EngineError:
    """Where in the engine it raised (innermost frame inside its package), every frame inside the
    package on the way (innermost first: the static trace may name a caller, such as the forward
    that finalizes a collector whose own check raises) and the engine's own message."""
    inside = f"{os.sep}{package}{os.sep}"
    frames = [f"{fr.filename[fr.filename.rfind(inside) + 1:]}:{fr.lineno}"
              for fr in reversed(traceback.extract_tb(exc.__traceback__)) if inside in fr.filename]
    msg = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return {"outcome": "raises", "raised_at": frames[0] if frames else None, "raised_through": frames,
            "message": " ".join(msg)[:500]}


def load_runner_script(path: str, probe: EngineSpec) -> Any:
    """The engine runner script named by the profile, loaded as a module that sees this one as
    ``core`` and the profile's probe settings as ``probe``."""
    import importlib.util

    name = "flowtrace_engine_runner_script"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load the engine runner script {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # functions handed to the engine's RPC are found again by name
    spec.loader.exec_module(module)
    module.core = sys.modules[__name__]  # type: ignore[attr-defined]  # after the script's own placeholders
    module.probe = probe  # type: ignore[attr-defined]
    return module


def _run_case(
    script: Any, engine: Any, case: CaseSpec, first_draft: CaseSpec | None, spec: RunnerSpec
) -> tuple[CaseRecord, bool]:
    """One case: ids to the engine, a short generation, what was captured. (record, raised)"""
    tc = time.time()
    rec: CaseRecord = {
        "name": case["name"],
        "mode": case["mode"],
        "ids": case["ids"],
        "fc_slots": case["fc_slots"],
        "plumbing": "load" if case is first_draft or getattr(script, "starts_per_case", False) else "rerun",
    }
    raised = False
    try:
        rec["engine_layers"] = script.set_ids(engine, case["mode"], case["ids"], case["key"])
        script.generate(engine, PROMPT, spec.get("tokens", 4))
        rec.update(script.observe(engine))
    except Exception as exc:  # noqa: BLE001 - the engine raised on this request: that is the observation
        rec = {**rec, **_engine_error(exc, spec["probe"]["package"])}  # every field of the error, as it is
        try:  # what the target captured and what reached the fc before the raise
            rec = {**rec, **_captured(script.observe(engine))}
        except Exception:  # noqa: BLE001 - nothing recorded: the raise alone is reported
            pass
        raised = True
    rec["seconds"] = time.time() - tc
    return rec, raised


def _captured(seen: Observed) -> Observed:
    """What the target captured and what reached the fc, from an observation (its verdict left out)."""
    kept = seen.copy()
    kept.pop("outcome", None)
    kept.pop("reason", None)
    return kept


def run(spec: RunnerSpec) -> RunnerResult:
    t0 = time.time()
    probe = spec["probe"]
    for name, value in probe.get("env", {}).items():
        os.environ.setdefault(name, value)
    work = spec["workdir"]
    cfg, shrunk = shrink_config(spec["target_config"], spec.get("num_layers"))
    result: RunnerResult = {"shrunk": shrunk, "architecture": (cfg.get("architectures") or [None])[0], "cases": []}
    try:
        build_target(cfg, os.path.join(work, "target"), spec.get("seed", 0))
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the caller prints it
        result["build_error"] = f"{type(exc).__name__}: {exc}"
        return result
    cases = spec["cases"]
    draft_cases = [c for c in cases if c["mode"] == "draft"]
    first = draft_cases[0] if draft_cases else None
    ctx: dict[str, Any] = {
        "target": os.path.join(work, "target"),
        "draft": None,
        "config": cfg,
        "device": spec.get("device", "cpu"),
        "shrunk": result["shrunk"],
        "latent_attention": bool(text_part(cfg).get("kv_lora_rank")),
    }
    if first is not None:
        ctx["draft"] = os.path.join(work, "draft")
        build_draft(
            cfg, ctx["draft"], first["ids"], first["key"], first["fc_slots"], spec.get("seed", 0), probe["draft"],
            first.get("draft_layers") or 1,
        )
    script = load_runner_script(probe["runner"], probe)
    result["engine_version"] = script.version()
    t_load = time.time()
    try:
        engine = script.start(ctx)
    except Exception as exc:  # noqa: BLE001 - the engine refused this model at start-up
        result["start_error"] = _engine_error(exc, probe["package"])
        result["seconds"] = time.time() - t0
        result["peak_rss_mb"] = _peak_rss_mb()
        return result
    result["load_seconds"] = time.time() - t_load
    info = script.install(engine)
    result.update({"model_class": info["model_class"], "num_layers": info["num_layers"],
                   "stack_class": info["stack_class"]})
    for n, case in enumerate(cases):
        rec, raised = _run_case(script, engine, case, first, spec)
        rec["fc_width"] = info["fc_width"]
        result["cases"].append(rec)
        # the engine core is dead: the caller reruns the rest
        if raised and not getattr(script, "starts_per_case", False):
            result["cases"].extend(
                {
                    "name": c["name"],
                    "ids": c["ids"],
                    "mode": c["mode"],
                    "outcome": "not_run",
                    "reason": "the engine raised on an earlier case in this process",
                }
                for c in cases[n + 1 :]
            )
            break
    result["seconds"] = time.time() - t0
    result["peak_rss_mb"] = _peak_rss_mb()
    return result


class About(TypedDict):
    """``--about``: the engine venv's installed release and package folder (None: not installed)."""

    version: str | None
    source: str | None
    python: str


def about(package: str, dist: str) -> About:
    """The installed version and package folder, found without importing the engine (fast)."""
    import importlib.metadata
    import importlib.util

    try:
        version = importlib.metadata.version(dist) if dist else None
    except importlib.metadata.PackageNotFoundError:
        version = None
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return {"version": version, "source": locations[0] if locations else None, "python": sys.version.split()[0]}


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[1] == "--about":
        print(json.dumps(about(argv[2], argv[3])))
        return 0
    with open(argv[1]) as fh:
        spec = json.load(fh)
    result: RunnerResult
    try:
        result = run(spec)
    except Exception as exc:  # noqa: BLE001 - one JSON answer, always
        result = {"fatal_error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    with open(argv[2], "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
