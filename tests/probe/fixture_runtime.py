"""Run a stand-in fixture engine as torch code, so the probe can check the static trace on it.

The fixture engines under ``tests/fixtures/engines`` (and the probe's own under
``tests/probe/agreement_engines``) are written for the static analyzer: plain Python classes
whose layers leave out the real compute (an identity attention, ``return hidden_states,
residual``). Their capture code -- setters, capture loops, callbacks, packers, return paths --
is the part under test, and it runs here unchanged. This module adds only what an engine's
runtime would supply around it:

* the compute a stand-in leaves out, so that every boundary holds a different value: a small
  random ``Linear`` mix in place of each one-argument compute sub-module of a layer
  (``self.mlp``, ``self.self_attn``), or, for a layer without one, on the layer's output;
* torch modules the probe can hook: an ``nn.Embedding`` that makes the hidden states from the
  token ids, and the decoder layers wrapped in an ``nn.ModuleList`` installed on their holder;
* the runner's part: call the entry setter (with the ids, or the engine default: the default
  getter's ids, else ``None``) on the first forward -- so a setter that raises is a run that
  raises --, call the model's forward, unpack ``(hidden, aux)`` and concatenate the aux states
  along the last dimension, as the draft does before its ``fc``.

A stand-in layer's output is perturbed only when it has no compute sub-module to replace, which
keeps captures made *inside* a layer (before or after its compute) on the boundary values.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

HIDDEN, VOCAB, TOKENS = 16, 64, 5
_INPUT_NAMES = ("input_ids",)
_POSITION_NAMES = ("positions", "position_ids")
_HIDDEN_NAMES = ("hidden_states", "inputs_embeds", "hidden")
_DESCEND = ("model", "language_model")


class Mix(nn.Module):
    """The compute a stand-in leaves out: ``x + 0.5 * tanh(W x)`` with random W."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.5 * torch.tanh(self.proj(x))


class ProbeLayer(nn.Module):
    """A hookable torch wrapper around one stand-in decoder layer (called exactly as the loop calls it)."""

    def __init__(self, inner: Any, hidden: int, perturb: bool, computes: list[nn.Module]) -> None:
        super().__init__()
        self._inner = inner
        self.mix = Mix(hidden) if perturb else None
        self.computes = nn.ModuleList(computes)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self._inner(*args, **kwargs)
        if self.mix is None:
            return out
        if isinstance(out, torch.Tensor):
            return self.mix(out)
        if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
            return (self.mix(out[0]),) + out[1:]
        return out

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_inner"], name)


def _one_arg_forward(value: Any) -> bool:
    """A stand-in compute module: an object whose class defines ``forward(self, x)``."""
    fwd = getattr(type(value), "forward", None)
    if fwd is None or isinstance(value, (nn.Module, torch.Tensor, type)):
        return False
    try:
        params = list(inspect.signature(fwd).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    required = [p for p in params if p.default is inspect.Parameter.empty and p.kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    return len(required) == 1 and len(params) == 1


def _wrap_layer(layer: Any, hidden: int) -> ProbeLayer:
    computes: list[nn.Module] = []
    for name, value in list(vars(layer).items()):
        if _one_arg_forward(value):
            mix = Mix(hidden)
            setattr(layer, name, mix)
            computes.append(mix)
    return ProbeLayer(layer, hidden, perturb=not computes, computes=computes)


def _own_objects(obj: Any, packages: set[str]) -> list[Any]:
    """Attribute values of ``obj`` that are instances of the engine's own classes."""
    out = []
    for value in vars(obj).values():
        mod = type(value).__module__.split(".")[0]
        if mod in packages and hasattr(value, "__dict__") and not isinstance(value, type):
            out.append(value)
    return out


def find_layer_lists(root: Any, attr: str, packages: set[str]) -> list[tuple[Any, list]]:
    """(holder, list) for each non-empty list attribute ``attr`` reachable from ``root``."""
    found: list[tuple[Any, list]] = []
    seen: set[int] = set()
    todo = [(root, 0)]
    while todo:
        obj, depth = todo.pop()
        if id(obj) in seen or depth > 4:
            continue
        seen.add(id(obj))
        value = vars(obj).get(attr)
        if isinstance(value, list) and value and all(id(value) != id(v) for _, v in found):
            found.append((obj, value))
        todo += [(o, depth + 1) for o in _own_objects(obj, packages)]
    return found


def _forward_owner(model: Any) -> Any:
    """The object whose ``forward`` the runner calls: the model's, else its inner model's."""
    obj = model
    for _ in range(4):
        if getattr(type(obj), "forward", None) is not None:
            return obj
        obj = next((getattr(obj, n) for n in _DESCEND if hasattr(obj, n)), None)
        if obj is None:
            break
    raise RuntimeError(f"{type(model).__name__}: no forward on the model or its inner model")


def _forward_kwargs(fn: Any, input_ids: torch.Tensor, hidden: torch.Tensor) -> dict[str, Any]:
    """Token ids and positions by name; the hidden states go to the parameter named like them,
    else to the first other required one (a model may call its stream ``residual``)."""
    kwargs: dict[str, Any] = {}
    params = inspect.signature(fn).parameters
    stream = next((n for n in params if n in _HIDDEN_NAMES), None)
    for name, p in params.items():
        if name in _INPUT_NAMES:
            kwargs[name] = input_ids
        elif name in _POSITION_NAMES:
            kwargs[name] = torch.arange(input_ids.shape[-1])
        elif name == stream or (stream is None and p.default is inspect.Parameter.empty
                                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)):
            kwargs[name], stream = hidden, name
        elif p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            kwargs[name] = None
    return kwargs


def _runner_aux(out: Any) -> tuple[Any, Any]:
    """(hidden, aux) as a runner unpacks a model's return value; aux None when there is none."""
    if isinstance(out, tuple) and len(out) == 2:
        hidden, aux = out
        if isinstance(aux, torch.Tensor) or (
            isinstance(aux, (list, tuple)) and aux and all(isinstance(t, torch.Tensor) for t in aux)
        ):
            return hidden, aux
        return hidden, None
    return out, None


class FixtureRunner(nn.Module):
    """The runner around one fixture model: embedding, setter call, forward, aux concat."""

    def __init__(self, model: Any, layers: nn.ModuleList | None, setter: str | None,
                 getters: tuple[str, ...], layer_ids: list[int] | None,
                 build_error: BaseException | None = None, engine_runner: Any = None) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        if isinstance(model, nn.Module):
            self.target = model  # a torch engine: its own layers are the ones to hook
            if not any(n.split(".")[-1] == "layers" for n, _ in model.named_modules()):
                self.layers = nn.ModuleList([Mix(HIDDEN)])  # none: one idle layer for the hooks
        else:
            self.layers = layers
        self._model, self._setter, self._getters = model, setter, getters
        self._ids, self._configured, self._build_error = layer_ids, False, build_error
        self._engine_runner = engine_runner  # (class, method): the tree's own runner hands the ids over

    def _configure(self) -> None:
        if self._build_error is not None:
            raise self._build_error
        if self._engine_runner is not None and not self._configured:
            self._configured = True
            cls, method = self._engine_runner
            getattr(cls(self._model, self._ids), method)()  # a model it refuses raises in its code
            return
        if self._configured or self._setter is None:
            return
        self._configured = True
        ids = self._ids
        if ids is None:
            getter = next((g for g in self._getters if hasattr(self._model, g)), None)
            if getter is not None:
                ids = list(getattr(self._model, getter)())
        getattr(self._model, self._setter)(ids)

    def forward(self, input_ids: torch.Tensor) -> Any:
        self._configure()
        hidden = self.embed_tokens(input_ids)
        owner = _forward_owner(self._model)
        out = owner.forward(**_forward_kwargs(owner.forward, input_ids, hidden))
        hidden_out, aux = _runner_aux(out)
        if isinstance(aux, (list, tuple)):
            torch.cat(list(aux), dim=-1)  # what the draft's fc receives
            return hidden_out, list(aux)
        return out if aux is None else (hidden_out, aux)


def target_config(num_layers: int, cls_name: str = "", text_architecture: str | None = None) -> dict:
    """A tiny target's config.json: sizes, the class as its architecture and, as Hugging Face
    names them, the lowercased prefix as model_type (AlphaForCausalLM -> "alpha"). A wrapper
    whose language model the config names gets a ``text_config`` naming ``text_architecture``;
    the same document is what the static trace is given as its target config."""
    model_type = cls_name.split("For")[0].lower() if "For" in cls_name else cls_name.lower()
    doc: dict = {"num_hidden_layers": num_layers, "hidden_size": HIDDEN, "vocab_size": VOCAB,
                 "architectures": [cls_name], "model_type": model_type}
    if text_architecture is not None:
        doc["text_config"] = target_config(num_layers, text_architecture)
    return doc


def _config(doc: dict) -> SimpleNamespace:
    """The config object the engine code reads (attributes); without its own ``text_config``
    a config is its own text config, as a text-only Hugging Face config reads."""
    cfg = SimpleNamespace(**{k: _config(v) if isinstance(v, dict) else v for k, v in doc.items()})
    if not hasattr(cfg, "text_config"):
        cfg.text_config = cfg
    return cfg


def _construct(cls: type, cfg: SimpleNamespace) -> Any:
    """``cls(config)``; a pipeline group parameter gets a last-rank group (the rank that
    owns the draft, the path the static trace takes), a further ``*config`` parameter the
    config too (a wrapper built as ``(vllm_config, config)``)."""
    try:
        names = list(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        names = []
    if not names:
        return cls()
    group = SimpleNamespace(is_last_rank=True, is_first_rank=True, world_size=1)
    kwargs: dict[str, Any] = {name: group for name in names[1:] if "group" in name}
    kwargs.update({name: cfg for name in names[1:] if name.endswith("config")})  # (vllm_config, config)
    return cls(cfg, **kwargs)


@contextlib.contextmanager
def engine_imports(root: str, top: str):
    """Imports from the engine tree at ``root``, hermetically: engine trees share package names
    (sglang, vllm), so the package is imported fresh and ``sys.modules`` is put back as it was
    on exit (the loaded code keeps its own globals)."""
    mine = lambda k: k == top or k.startswith(top + ".")  # noqa: E731
    saved = {k: v for k, v in sys.modules.items() if mine(k)}
    for key in saved:
        del sys.modules[key]
    sys.path.insert(0, str(Path(root)))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(Path(root)))
        for key in [k for k in sys.modules if mine(k)]:
            del sys.modules[key]
        sys.modules.update(saved)


def import_class(root: str, qualname: str) -> type:
    """Import ``qualname`` from the engine tree at ``root`` (see :func:`engine_imports`)."""
    module, _, name = qualname.rpartition(".")
    with engine_imports(root, module.split(".")[0]) as load:
        return getattr(load(module), name)


def _builder_classes(root: str, load, selector: str, method: str) -> list[type]:
    """Config-builder classes of the tree: defined in a module that names both classmethods."""
    found = []
    for path in sorted(Path(root).rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if f"def {selector}" not in text or f"def {method}" not in text:
            continue
        rel = path.relative_to(root).with_suffix("")
        module = load(".".join(p for p in rel.parts if p != "__init__"))
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__ and selector in vars(value):
                found.append(value)
    return found


def _run_builder(builders: list[type], cfg: SimpleNamespace, selector: str, method: str,
                 spec: tuple[str, str]) -> BaseException | None:
    """Call the first builder whose selector takes ``cfg`` (as the engine's registry does), with
    the speculative method; a builder that raises is the run raising (returned, re-raised by
    the runner's first forward, traceback kept)."""
    for b in builders:
        if getattr(b, selector)(cfg):
            try:
                getattr(b, method)(cfg, **{spec[0]: spec[1]})
            except Exception as exc:  # the engine refusing the method: part of the run
                return exc
            return None
    return None


def build(root: str, qualname: str, num_layers: int, layer_ids: list[int] | None = None,
          setter: str | None = None, getters: list[str] | tuple[str, ...] = (),
          layers_attribute: str = "layers", builder: list[str] | tuple[str, ...] = (),
          spec_method: list[str] | tuple[str, ...] = (), seed: int = 0,
          device: Any = None, dtype: Any = None, config: dict | None = None,
          runner: list[str] | tuple[str, ...] = ()):
    """Probe factory: (runner, example inputs) for one fixture model class and id set.

    ``builder`` = (selector, method) names an engine's config-builder classmethods and
    ``spec_method`` = (keyword, value) the speculative method it is built for: the builder
    selected for the target config runs before the model is built, as the engine does.
    ``config`` is the target's config.json (:func:`target_config` when not given).
    ``runner`` = (module, class, method) names the tree's own runner: ``cls(model, ids).method()``
    hands the ids to the model instead of a direct setter call (its checks are part of the run)."""
    torch.manual_seed(seed)
    module, _, name = qualname.rpartition(".")
    with engine_imports(root, module.split(".")[0]) as load:
        cls = getattr(load(module), name)
        cfg = _config(config or target_config(num_layers, name))
        error = None
        if builder:
            found = _builder_classes(root, load, builder[0], builder[1])
            error = _run_builder(found, cfg, builder[0], builder[1], tuple(spec_method))
        model = _construct(cls, cfg)
        engine_runner = (getattr(load(runner[0]), runner[1]), runner[2]) if runner else None
    layers = None
    if not isinstance(model, nn.Module):
        layers = _torch_layers(model, layers_attribute, {qualname.split(".")[0]}, qualname)
    fixture = FixtureRunner(model, layers, setter, tuple(getters), layer_ids, error, engine_runner)
    ids = torch.randint(0, VOCAB, (TOKENS,), generator=torch.Generator().manual_seed(seed))
    return fixture, {"input_ids": ids}


def _torch_layers(model: Any, attr: str, packages: set[str], qualname: str) -> nn.ModuleList:
    """The stand-in layer list wrapped as torch modules and installed on its holder."""
    lists = find_layer_lists(model, attr, packages)
    if len(lists) > 1:
        raise RuntimeError(f"{qualname}: expected one {attr!r} list, found {len(lists)}")
    if not lists:  # a model without decoder layers (it cannot capture): one idle layer for the hooks
        return nn.ModuleList([Mix(HIDDEN)])
    holder, stand_ins = lists[0]
    layers = nn.ModuleList(_wrap_layer(layer, HIDDEN) for layer in stand_ins)
    setattr(holder, attr, layers)
    return layers
