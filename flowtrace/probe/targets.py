"""Build the target model and find the modules the probe hooks.

A target comes from ``--factory module:function`` (the function returns ``(model, example_inputs)``
or ``(model, example_inputs, make_inputs)``) or from ``--hf-config`` (random-init Hugging Face model,
needs ``transformers``). The embedding, the decoder-layer list, the final norm, the LM head and an
EAGLE-3 ``fc`` are found by walking the module tree, and each can be named explicitly instead,
because real engines nest them in different places.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from flowtrace.probe.errors import MissingDependency, ProbeError
from flowtrace.probe.results import TargetInfo

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
FINAL_NORM_NAMES = ("norm", "final_layernorm", "final_norm", "ln_f", "norm_f")
EMBED_FALLBACK_NAMES = ("embed_tokens", "wte", "tok_embeddings", "word_embeddings", "embed_in")


# A factory's make_inputs(tokens): the model's inputs for a token sequence (a dict of keyword
# arguments or a tuple of positional ones, as the factory's own example inputs are).
MakeInputs = Callable[[torch.Tensor], Any]


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """How to obtain the target and (optionally) which modules to hook; all user-supplied."""

    factory: str | None = None
    factory_args: Mapping[str, Any] = field(default_factory=dict)
    hf_config: str | None = None
    path: tuple[str, ...] = ()
    embed_module: str | None = None
    layers_module: str | None = None
    final_norm_module: str | None = None
    lm_head_module: str | None = None
    fc_module: str | None = None
    # --hf-config: build a tiny model of the same architecture (widths that never decide which
    # boundary is captured), as `probe engine` does; num_layers: also fewer layers (None: as configured)
    shrink: bool = False
    num_layers: int | None = None


@dataclass(slots=True)
class Target:
    """A built target with the modules the probe hooks. Mutable: it owns a live model."""

    model: nn.Module
    inputs: Any
    make_inputs: MakeInputs | None
    name: str
    source: str
    device: torch.device
    dtype: torch.dtype
    embed_name: str
    embed: nn.Module
    layers_name: str
    layers: nn.ModuleList
    final_norm_name: str | None
    final_norm: nn.Module | None
    lm_head_name: str | None
    lm_head: nn.Module | None
    fc_name: str | None
    fc: nn.Module | None
    hidden_size: int
    vocab_size: int | None
    warnings: list[str] = field(default_factory=list)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def info(self) -> TargetInfo:
        return TargetInfo(
            name=self.name,
            source=self.source,
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            vocab_size=self.vocab_size,
            embed_module=self.embed_name,
            layers_module=self.layers_name,
            parameters=sum(p.numel() for p in self.model.parameters()),
        )


def resolve_device(device: str) -> torch.device:
    """``auto`` picks CUDA when available, so the same command line works on a laptop and a GPU box."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ProbeError(
            f"--device {device}: CUDA is not available in this torch build "
            f"({torch.__version__}); use --device cpu"
        )
    try:
        return torch.device(device)
    except RuntimeError:
        raise ProbeError(f"--device {device!r} is not a device; use auto, cpu or cuda") from None


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` = float32 on CPU (exact and fast enough at probe sizes), bfloat16 on CUDA."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ProbeError(f"--dtype {dtype!r} is not supported; use float32, bfloat16 or float16")
    return DTYPES[dtype]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def move_inputs(obj: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """Put example inputs where the model is; only floating tensors change dtype."""
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point():
            return obj.to(device=device, dtype=dtype)
        return obj.to(device=device)
    if isinstance(obj, Mapping):
        return {k: move_inputs(v, device, dtype) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(move_inputs(v, device, dtype) for v in obj)
    if isinstance(obj, list):
        return [move_inputs(v, device, dtype) for v in obj]
    return obj


def call_model(model: nn.Module, inputs: Any) -> Any:
    """Kwargs dict -> model(**d); tuple/list -> model(*args); anything else -> model(x)."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


# --------------------------------------------------------------------------- factory


def _add_paths(paths: tuple[str, ...]) -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    for p in reversed(paths):
        ap = os.path.abspath(p)
        if not os.path.isdir(ap):
            raise ProbeError(f"--path {p}: not a directory")
        if ap not in sys.path:
            sys.path.insert(0, ap)


def import_factory(spec: str, paths: tuple[str, ...] = ()) -> Callable[..., Any]:
    """Resolve ``module:function`` (or ``path/to/file.py:function``) to a callable."""
    if spec.count(":") < 1 or not spec.rsplit(":", 1)[1] or not spec.rsplit(":", 1)[0]:
        raise ProbeError(f"--factory must look like module:function, got {spec!r}")
    mod_name, fn_name = spec.rsplit(":", 1)
    _add_paths(paths)
    try:
        if mod_name.endswith(".py"):
            file = Path(mod_name)
            if not file.is_file():
                raise ProbeError(f"--factory: file {mod_name} does not exist")
            mspec = importlib.util.spec_from_file_location(f"_flowtrace_factory_{file.stem}", file)
            assert mspec is not None and mspec.loader is not None
            module = importlib.util.module_from_spec(mspec)
            sys.modules[mspec.name] = module
            mspec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except ProbeError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and (mod_name == exc.name or mod_name.startswith(exc.name + ".")):
            raise ProbeError(
                f"--factory: cannot import module {mod_name!r} (not on sys.path); run from the "
                "folder that holds it or add that folder with --path DIR"
            ) from None
        raise ProbeError(f"--factory: importing {mod_name!r} failed: {exc}") from None
    except Exception as exc:  # user code: report in one line
        raise ProbeError(
            f"--factory: importing {mod_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    fn: Callable[..., Any] | None = getattr(module, fn_name, None)  # checked callable below
    if fn is None or not callable(fn):
        raise ProbeError(f"--factory: module {mod_name!r} has no callable {fn_name!r}")
    return fn


def _call_factory(
    fn: Callable[..., Any], spec: str, args: Mapping[str, Any], device: torch.device, dtype: torch.dtype
) -> Any:
    try:
        sig = inspect.signature(fn)
        params: Mapping[str, inspect.Parameter] = sig.parameters
        takes_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        params, takes_var_kw = {}, True
    kwargs: dict[str, Any] = {}
    # The factory may build directly on the device in the dtype (an 8B model should not be
    # materialised in float32 on the CPU first); offered only to factories that ask for them.
    if "device" in params or takes_var_kw:
        kwargs["device"] = device
    if "dtype" in params or takes_var_kw:
        kwargs["dtype"] = dtype
    for k, v in args.items():
        if k not in params and not takes_var_kw:
            raise ProbeError(
                f"--factory-arg {k}=...: factory {spec} takes no argument {k!r} "
                f"(it takes: {', '.join(params) or 'nothing'})"
            )
        kwargs[k] = v
    try:
        return fn(**kwargs)
    except ProbeError:
        raise
    except Exception as exc:
        raise ProbeError(f"--factory {spec} raised {type(exc).__name__}: {exc}") from None


def _unpack_factory_result(result: Any, spec: str) -> tuple[nn.Module, Any, MakeInputs | None]:
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise ProbeError(
            f"--factory {spec} must return (model, example_inputs) or "
            f"(model, example_inputs, make_inputs), got {type(result).__name__}"
        )
    model, inputs = result[0], result[1]
    make = result[2] if len(result) == 3 else None
    if not isinstance(model, nn.Module):
        raise ProbeError(
            f"--factory {spec}: the first returned value must be a torch.nn.Module, "
            f"got {type(model).__name__}"
        )
    if not isinstance(inputs, (Mapping, tuple, list, torch.Tensor)):
        raise ProbeError(
            f"--factory {spec}: example_inputs must be a dict of kwargs or a tuple of args, "
            f"got {type(inputs).__name__}"
        )
    if make is not None and not callable(make):
        raise ProbeError(f"--factory {spec}: the third returned value (make_inputs) must be callable")
    return model, inputs, make


# --------------------------------------------------------------------------- hf-config


def _shrunk(data: dict[str, Any], num_layers: int | None) -> tuple[dict[str, Any], list[str]]:
    """The config shrunk as ``probe engine`` shrinks it (its stdlib-only runner's rules: hidden
    64, 2 heads, small experts, a 512-token vocabulary; the layer count kept unless given), and
    one line per change."""
    from flowtrace.probe.engine_runner import shrink_config, text_part

    layers = num_layers or text_part(data).get("num_hidden_layers")
    small, changes = shrink_config(data, layers if isinstance(layers, int) and layers > 0 else None)
    text = text_part(small)
    rope = text.get("qk_rope_head_dim")
    if isinstance(rope, int) and "head_dim" in text and text["head_dim"] != rope:
        # latent attention: transformers sizes its rotary embedding by head_dim = qk_rope_head_dim
        earlier = next((c for c in changes if c["key"].rpartition(".")[2] == "head_dim"), None)
        if earlier is None:
            changes.append({"key": "head_dim", "from": text["head_dim"], "to": rope})
        else:
            earlier["to"] = rope
        text["head_dim"] = rope
    return small, [f"{c['key']} {c['from']} -> {c['to']}" for c in changes]


def _load_hf_config(
    path: str, device: torch.device, dtype: torch.dtype, seed: int, shrink: bool = False, num_layers: int | None = None
) -> tuple[nn.Module, dict[str, Any], str, list[str]]:
    try:
        import transformers
    except ImportError:
        raise MissingDependency(
            "--hf-config needs the `transformers` package, which is not installed: "
            "pip install transformers (or describe the target with --factory module:function; "
            "a Llama-shaped config also works with --factory "
            "flowtrace.probe.synthetic:from_hf_config --factory-arg config=PATH)"
        ) from None
    from flowtrace.sources.configs import ConfigError, config_path, read_config

    cfg_file = config_path(path)
    if not cfg_file.is_file():
        raise ProbeError(f"--hf-config: {cfg_file} does not exist")
    try:
        data = read_config(cfg_file, "--hf-config")
    except ConfigError as exc:
        raise ProbeError(f"--hf-config: {exc}") from None
    changes: list[str] = []
    if shrink:
        data, changes = _shrunk(data, num_layers)
    model_type = data.pop("model_type", None)
    if not model_type:
        raise ProbeError(f"--hf-config: {cfg_file} has no \"model_type\" key")
    try:
        config = transformers.AutoConfig.for_model(model_type, **data)
        torch.manual_seed(seed)
        model: nn.Module | None = None
        # transformers leaves from_config unannotated: what it builds is a PreTrainedModel, an nn.Module
        from_config: Callable[..., nn.Module] = transformers.AutoModelForCausalLM.from_config
        # the dtype keyword was renamed across transformers versions; eager attention keeps
        # every op visible to the hooks
        for kw in ({"dtype": dtype}, {"torch_dtype": dtype}, {}):
            try:
                model = from_config(config, attn_implementation="eager", **kw)
                break
            except TypeError:
                continue
        if model is None:
            model = from_config(config)
    except Exception as exc:
        raise ProbeError(
            f"--hf-config: transformers could not build {model_type!r} from {cfg_file}: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    vocab = int(getattr(config, "vocab_size", 32000))
    gen = torch.Generator().manual_seed(seed)
    inputs = {"input_ids": torch.randint(0, vocab, (1, 16), generator=gen), "use_cache": False}
    size = "shrunk, random weights" if changes else "random weights"
    return model, inputs, f"{cfg_file} ({model_type}, {size})", changes


# --------------------------------------------------------------------------- module lookup


def _get(model: nn.Module, name: str, option: str) -> nn.Module:
    try:
        return model.get_submodule(name)
    except AttributeError:
        names = [n for n, _ in model.named_modules() if n]
        last = name.split(".")[-1]
        near = [n for n in names if n.split(".")[-1] == last][:5]
        hint = f" (modules named {last!r}: {', '.join(near)})" if near else ""
        raise ProbeError(f"{option} {name}: the model has no such submodule{hint}") from None


def _parent(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def find_layers(model: nn.Module, name: str | None, warnings: list[str]) -> tuple[str, nn.ModuleList]:
    """The decoder layers: an ``nn.ModuleList`` called ``layers`` (the longest, if several)."""
    if name:
        mod = _get(model, name, "--layers-module")
        if not isinstance(mod, (nn.ModuleList, nn.Sequential)) or len(mod) == 0:
            raise ProbeError(
                f"--layers-module {name}: expected a non-empty nn.ModuleList, got {type(mod).__name__}"
            )
        return name, mod  # type: ignore[return-value]
    found = [
        (n, m)
        for n, m in model.named_modules()
        if isinstance(m, nn.ModuleList) and n.split(".")[-1] == "layers" and len(m) > 0
    ]
    if not found:
        lists = [n for n, m in model.named_modules() if isinstance(m, nn.ModuleList)][:6]
        hint = f" (ModuleLists found: {', '.join(lists)})" if lists else ""
        raise ProbeError(
            "no nn.ModuleList named 'layers' in the model; name the decoder layers with "
            f"--layers-module NAME{hint}"
        )
    best = max(found, key=lambda nm: len(nm[1]))  # max keeps the first among equals
    if len(found) > 1:
        warnings.append(
            f"several ModuleLists named 'layers' ({', '.join(n for n, _ in found)}); "
            f"using {best[0]} ({len(best[1])} layers); override with --layers-module"
        )
    return best


def find_embedding(
    model: nn.Module, name: str | None, layers_name: str
) -> tuple[str, nn.Module]:
    """The token embedding: prefer an ``nn.Embedding`` called embed_tokens beside the layers."""
    if name:
        return name, _get(model, name, "--embed-module")
    embs = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Embedding)]
    parent = _parent(layers_name)
    preds: tuple[Callable[[str], bool], ...] = (
        lambda n: n.split(".")[-1] == "embed_tokens" and _parent(n) == parent,
        lambda n: n.split(".")[-1] == "embed_tokens",
        lambda n: n.split(".")[-1] in EMBED_FALLBACK_NAMES and _parent(n) == parent,
        lambda n: n.split(".")[-1] in EMBED_FALLBACK_NAMES,
    )
    for pred in preds:
        for n, m in embs:
            if pred(n):
                return n, m
    names = ", ".join(n for n, _ in embs[:6]) or "none"
    raise ProbeError(
        f"no nn.Embedding named like embed_tokens (embeddings found: {names}); "
        "name it with --embed-module NAME"
    )


def _find_optional(
    model: nn.Module, name: str | None, option: str, names: tuple[str, ...], parent: str | None
) -> tuple[str | None, nn.Module | None]:
    if name:
        return name, _get(model, name, option)
    mods = list(model.named_modules())
    if parent is not None:
        for n, m in mods:
            if n.split(".")[-1] in names and _parent(n) == parent:
                return n, m
    for n, m in mods:
        if n.split(".")[-1] in names:
            return n, m
    return None, None


def find_fc(model: nn.Module, name: str | None, hidden: int) -> tuple[str | None, nn.Module | None]:
    """An EAGLE-3 ``fc``: a Linear called fc whose input is k x hidden wide (k >= 2)."""
    if name:
        mod = _get(model, name, "--fc-module")
        return name, mod
    for n, m in model.named_modules():
        if (
            n.split(".")[-1] == "fc"
            and isinstance(m, nn.Linear)
            and m.in_features % hidden == 0
            and m.in_features // hidden >= 2
        ):
            return n, m
    return None, None


# --------------------------------------------------------------------------- entry point


def load_target(
    spec: TargetSpec, device: torch.device, dtype: torch.dtype, seed: int = 0
) -> Target:
    """Build the target on ``device``/``dtype`` in eval mode and locate its modules."""
    if bool(spec.factory) == bool(spec.hf_config):
        raise ProbeError("give exactly one of --factory module:function or --hf-config PATH")
    torch.manual_seed(seed)
    make = None
    changes: list[str] = []
    if spec.factory:
        fn = import_factory(spec.factory, spec.path)
        model, inputs, make = _unpack_factory_result(
            _call_factory(fn, spec.factory, spec.factory_args, device, dtype), spec.factory
        )
        name, source = spec.factory, "factory"
    else:
        model, inputs, name, changes = _load_hf_config(
            spec.hf_config or "", device, dtype, seed, spec.shrink, spec.num_layers
        )
        source = "hf-config"
    needs_move = any(
        p.device != device or (p.is_floating_point() and p.dtype != dtype)
        for p in model.parameters()
    )
    if needs_move:
        model = model.to(device=device, dtype=dtype)
    model.eval()
    inputs = move_inputs(inputs, device, dtype)
    warnings: list[str] = []
    if spec.hf_config and changes:
        warnings.append(
            "--hf-config built a tiny random model of the same architecture (widths never decide which boundary is"
            f" captured; --full-size builds it as configured): {'; '.join(changes)}"
        )
    layers_name, layers = find_layers(model, spec.layers_module, warnings)
    embed_name, embed = find_embedding(model, spec.embed_module, layers_name)
    hidden = getattr(embed, "embedding_dim", None)
    if hidden is None:
        w = getattr(embed, "weight", None)
        if w is None or w.dim() != 2:
            raise ProbeError(
                f"--embed-module {embed_name}: cannot tell the hidden size (no 2-D weight)"
            )
        hidden = w.shape[1]
    vocab = getattr(embed, "num_embeddings", None)
    fn_name, fnorm = _find_optional(
        model, spec.final_norm_module, "--final-norm-module", FINAL_NORM_NAMES, _parent(layers_name)
    )
    lm_name, lm = _find_optional(model, spec.lm_head_module, "--lm-head-module", ("lm_head",), "")
    fc_name, fc = find_fc(model, spec.fc_module, int(hidden))
    return Target(
        model=model,
        inputs=inputs,
        make_inputs=make,
        name=name,
        source=source,
        device=device,
        dtype=dtype,
        embed_name=embed_name,
        embed=embed,
        layers_name=layers_name,
        layers=layers,
        final_norm_name=fn_name,
        final_norm=fnorm,
        lm_head_name=lm_name,
        lm_head=lm,
        fc_name=fc_name,
        fc=fc,
        hidden_size=int(hidden),
        vocab_size=None if vocab is None else int(vocab),
        warnings=warnings,
    )


def _looks_like_positions(t: torch.Tensor) -> bool:
    n = t.shape[-1]
    return bool(torch.equal(t.reshape(-1, n)[0].cpu(), torch.arange(n)))


def _ids_key(target: Target, items: list[tuple[Any, Any]]) -> Any:
    """The key (or position) of the token ids among the example inputs: ``input_ids`` when
    present, else the first integer tensor. Its own step because the other inputs are
    rebuilt relative to its shape, and a target without one cannot be re-run at all."""
    ids_key = None
    for k, v in items:
        if k == "input_ids" and isinstance(v, torch.Tensor):
            ids_key = k
    if ids_key is None:
        for k, v in items:
            if isinstance(v, torch.Tensor) and not v.is_floating_point() and v.dtype != torch.bool:
                ids_key = k
                break
    if ids_key is None:
        raise ProbeError(
            f"--factory {target.name}: cannot find input_ids in the example inputs to run new "
            "tokens; return (model, example_inputs, make_inputs) where make_inputs(tokens) "
            "builds the inputs"
        )
    return ids_key


def inputs_for_tokens(target: Target, tokens: torch.Tensor) -> Any:
    """Inputs that run the target on ``tokens`` (1-D), derived from the example inputs.

    The factory's ``make_inputs`` wins when given. Otherwise the example's ``input_ids`` (or first
    integer tensor) is replaced, keeping its rank; integer tensors of the same shape called
    positions/position_ids/cache_position become ``arange``; attention_mask becomes ones.
    """
    tokens = tokens.to(target.device)
    if target.make_inputs is not None:
        return move_inputs(target.make_inputs(tokens), target.device, target.dtype)
    ex = target.inputs
    items: list[tuple[Any, Any]] = list(ex.items()) if isinstance(ex, Mapping) else (
        list(enumerate(ex)) if isinstance(ex, (tuple, list)) else [(0, ex)]
    )
    ids_key = _ids_key(target, items)
    ex_ids = dict(items)[ids_key]
    shape = ex_ids.shape
    t = tokens.shape[0]

    def shaped(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(*([1] * (len(shape) - 1)), t)

    new: list[tuple[Any, Any]] = []
    for k, v in items:
        if k == ids_key:
            new.append((k, shaped(tokens.to(ex_ids.dtype))))
        elif isinstance(v, torch.Tensor) and v.shape == shape and not v.is_floating_point():
            kn = str(k)
            if kn == "attention_mask" or (v.dtype == torch.bool or bool((v == 1).all())):
                new.append((k, torch.ones(shaped(tokens).shape, dtype=v.dtype, device=v.device)))
            elif kn in ("positions", "position_ids", "cache_position") or _looks_like_positions(v):
                new.append((k, shaped(torch.arange(t, device=v.device, dtype=v.dtype))))
            else:
                raise ProbeError(
                    f"--factory {target.name}: cannot rebuild example input {k!r} for new tokens; "
                    "return (model, example_inputs, make_inputs) from the factory"
                )
        else:
            new.append((k, v))
    if isinstance(ex, Mapping):
        return dict(new)
    if isinstance(ex, (tuple, list)):
        return tuple(v for _, v in new) if isinstance(ex, tuple) else [v for _, v in new]
    return new[0][1]
