"""SGLang's engine runner script for ``flowtrace probe engine`` (the profile's ``[probe] runner``).

Package data, not flowtrace code: the engine venv's python runs it through flowtrace's
engine-neutral runner (flowtrace/probe/engine_runner.py), which sets ``core`` to itself before
this file runs. This is the only code that calls SGLang's own Python API.

SGLang has no offline engine that runs in one CPU process, so the script builds the parts a
scheduler process builds, the way SGLang's own attention test kit does
(sglang/test/kits/attention_unittest): the process context (``ServerArgs`` published by
``runtime_context.publish``, one-rank gloo groups), the model through SGLang's loader
(``model_loader.get_model``: its own weight loader runs), and a ``ModelRunner`` whose pools and
attention backend (``torch_native``) are set on the instance. On that runner the two methods a
server start runs do the hand-over of the ids:

- ``ModelRunner.init_spec_aux_hidden_state`` reads the draft config
  (model_runner_components/spec_aux_hidden_state.py ``_resolve_eagle_aux_hidden_state``);
- ``ModelRunner.init_attention_backends`` calls ``configure_aux_hidden_state_capture``
  (model_runner_components/attention_backend_setup.py), which calls the model's
  ``set_eagle3_layers_to_capture``, then builds the attention backend.

Each case builds the model anew (a fresh server start on its own copy of the draft config), so
what one case's setter did never leaks into the next. The request is one prefill forward (``ForwardMode.EXTEND``, the
hidden states captured in full, as the EAGLE worker asks for them); the tensor the logits processor
hands back as ``hidden_states`` is what the draft's fc receives.

Interface (called by the core): ``version()``, ``start(ctx)``, ``install(engine)``,
``set_ids(engine, mode, ids, key)``, ``generate(engine, prompt, tokens)``, ``observe(engine)``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from typing import Any

core: Any = None  # flowtrace/probe/engine_runner.py, set before this module runs
probe: dict = {}  # the profile's [probe] settings, as the host passed them (id_keys, package, ...)
starts_per_case = True  # every case is a fresh server start: plumbing as at load, nothing left broken by a raise
MAX_CONTEXT = 64
# Modules SGLang imports at start-up for multimodal preprocessing only (configs/__init__.py ->
# nano_nemotron_vl.py -> multimodal/internvl_utils.py imports torchvision.transforms).
_VISION_MODULES = ("torchvision", "torchvision.transforms", "torchvision.transforms.functional",
                   "torchvision.transforms.v2", "torchvision.transforms.v2.functional", "torchvision.io")


def version() -> str:
    import importlib.metadata

    return importlib.metadata.version("sglang")


def _vision_stub(shrunk: list) -> None:
    """torchvision's PyPI wheels are CUDA builds that do not load against torch+cpu; without a CPU
    build, SGLang's own import stub (the one it installs for missing platform packages on MPS)
    stands in, so a text model can start. Reported as a change made for the backend."""
    try:
        import torchvision  # noqa: F401
        return
    except Exception:  # noqa: BLE001 - absent, or a CUDA build that cannot load its operators
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
    from sglang._platform_stubs import _MockModule

    for name in _VISION_MODULES:
        sys.modules[name] = _MockModule(name)
    shrunk.append(
        {"key": "torchvision", "from": "not loadable (no CPU build)", "to": "sglang._platform_stubs._MockModule"}
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_args(ctx: dict, draft: str | None) -> Any:
    from sglang.srt.server_args import ServerArgs

    kw: dict[str, Any] = {"model_path": ctx["target"], "device": ctx["device"], "dtype": ctx["dtype"],
                          "attention_backend": "torch_native", "disable_cuda_graph": True, "tp_size": 1,
                          "random_seed": 0, "skip_server_warmup": True}
    if draft:
        kw.update(speculative_algorithm="EAGLE3", speculative_draft_model_path=draft)
    return ServerArgs(**kw)


def _hub_tower_names(folder: str, shrunk: list) -> None:
    """transformers 5 saves a SigLIP tower as ``vision_tower.<module>``; the hub checkpoints SGLang's
    loaders read (gemma3_mm.py ``load_weights``) name it ``vision_tower.vision_model.<module>``."""
    from safetensors.torch import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    if not os.path.exists(path):
        return
    weights = load_file(path)
    bare = [k for k in weights if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model.")]
    if not bare:
        return
    for k in bare:
        weights["vision_tower.vision_model." + k[len("vision_tower."):]] = weights.pop(k)
    save_file(weights, path, metadata={"format": "pt"})
    shrunk.append(
        {"key": "checkpoint names", "from": "vision_tower.*", "to": "vision_tower.vision_model.* (the hub layout)"}
    )


def start(ctx: dict) -> dict:
    """The process context a scheduler sets up; the model is built per case (``set_ids``)."""
    _vision_stub(ctx["shrunk"])
    _hub_tower_names(ctx["target"], ctx["shrunk"])
    ctx["dtype"] = "float32"
    from sglang.srt import runtime_context
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel

    sa = _server_args(ctx, ctx["draft"])
    runtime_context.publish(sa, role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=0))
    init_distributed_environment(backend="gloo", world_size=1, rank=0, local_rank=0,
                                 distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
    initialize_model_parallel(backend="gloo")
    engine = {"ctx": ctx, "drafts": 0}
    _build(engine, ctx["draft"])  # what install() reports on; every case then starts its own
    return engine


def _runner_class() -> type:
    import torch
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool, ReqToTokenPool
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    class ProbeModelRunner(ModelRunner):
        """A model runner on one CPU process: what ``__init__`` would build, set by hand, as
        SGLang's attention test kit does (MockModelRunner); the ids go through its own methods."""

        def __init__(self, model: Any, model_config: Any, server_args: Any) -> None:
            text = model_config.hf_text_config
            self.device, self.gpu_id, self.dtype = "cpu", 0, model_config.dtype
            self.kv_cache_dtype, self.kv_cache_dtype_str = model_config.dtype, "auto"
            self.model, self.model_config, self.server_args = model, model_config, server_args
            self.is_draft_worker, self.draft_attention_backend = False, None
            self.spec_algorithm = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
            self.page_size, self.max_running_requests, self.canary_manager = 1, 1, None
            self.attention_chunk_size, self.hisparse_coordinator, self.init_new_workspace = None, None, False
            self.is_hybrid_swa, self.sliding_window_size = False, None
            self.use_mla_backend = model_config.attention_arch == AttentionArch.MLA  # as ModelRunner.__init__ decides
            self.req_to_token_pool = ReqToTokenPool(size=1, max_context_len=MAX_CONTEXT, device="cpu",
                                                    enable_memory_saver=False)
            common = {
                "size": MAX_CONTEXT + 1,
                "page_size": 1,
                "dtype": model_config.dtype,
                "layer_num": text.num_hidden_layers,
                "device": "cpu",
                "enable_memory_saver": False,
            }
            if self.use_mla_backend:  # one latent (+ rope) vector per token, as the pool configurator sizes it
                self.token_to_kv_pool = MLATokenToKVPool(kv_lora_rank=model_config.kv_lora_rank,
                                                         qk_rope_head_dim=model_config.qk_rope_head_dim, **common)
            else:
                self.token_to_kv_pool = MHATokenToKVPool(
                    head_num=model_config.get_num_kv_heads(1),
                    head_dim=model_config.head_dim,
                    enable_alt_stream=False,
                    **common,
                )
            pool = self.token_to_kv_pool
            self.token_to_kv_pool_allocator = type(
                "Allocator", (), {"page_size": 1, "get_kvcache": staticmethod(lambda: pool)}
            )()
            self.init_kv_index_translator()
            torch.manual_seed(0)

    return ProbeModelRunner


def _build(engine: dict, draft: str | None) -> None:
    """One server start: server args naming ``draft``, the model through SGLang's loader, the runner."""
    from sglang.srt import runtime_context
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model

    sa = _server_args(engine["ctx"], draft)
    runtime_context.publish(sa, role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=0))
    model_config = ModelConfig.from_server_args(sa)
    model = get_model(
        model_config=model_config, load_config=LoadConfig(load_format="auto"), device_config=DeviceConfig("cpu")
    )
    engine.update(
        server_args=sa, model=model, runner=_runner_class()(model, model_config, sa), stack=_find_stack(model)
    )


def _find_stack(top: Any) -> Any:
    """The module that owns the decoder layers and the capture indices (the engine's holder)."""
    for mod in top.modules():
        if hasattr(mod, "layers_to_capture") and hasattr(mod, "layers"):
            return mod
    raise RuntimeError(f"no module of {type(top).__name__} has both `layers` and `layers_to_capture`")


def _stream(args: dict, out: Any) -> Any:
    """The residual stream at a layer's entry (``out`` None) or exit: SGLang's layers that keep
    the residual in the batch's stage state (``forward_batch.residual_stream``) are read through
    its own ``snapshot`` (value + residual, nothing consumed); others pass it themselves (None)."""
    batch = args.get("forward_batch")
    stream = getattr(batch, "residual_stream", None)
    if stream is None:
        return None
    value = args.get("hidden_states") if out is None else (out[0] if isinstance(out, tuple) else out)
    return stream.snapshot(value)


def install(engine: dict) -> dict:
    stack = engine["stack"]
    core.record_stack(stack, stack.layers, _stream)
    return {"model_class": type(engine["model"]).__name__, "stack_class": type(stack).__name__,
            "num_layers": len(stack.layers), "has_drafter": False, "fc_width": None}


def _draft_with(engine: dict, ids: list | None, key: str) -> str:
    """A copy of the first draft whose config carries ``ids`` at ``key`` (none: no ids at all)."""
    engine["drafts"] += 1
    first = engine["ctx"]["draft"]
    folder = f"{first}-{engine['drafts']}"
    shutil.copytree(first, folder)
    path = os.path.join(folder, "config.json")
    with open(path) as fh:
        cfg = json.load(fh)
    for k in probe["id_keys"]:  # where SGLang may read a draft's ids: [draft] layer_id_keys
        *tables, last = k.split(".")
        table = cfg
        for t in tables:
            table = table.get(t) if isinstance(table, dict) else None
        if isinstance(table, dict):
            table.pop(last, None)
    if ids is not None:
        core.put_dotted(cfg, key, list(ids))
    with open(path, "w") as fh:
        json.dump(cfg, fh, indent=1)
    return folder


def set_ids(engine: dict, mode: str, ids: list | None, key: str) -> list:
    """Hand the ids over on a fresh server start: a draft config that carries them (mode draft:
    the runner resolves them and configures the model), or the model's setter on a start
    without a draft (mode direct)."""
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import SpecAuxHiddenStateConfig

    _build(engine, _draft_with(engine, ids, key) if mode == "draft" else None)
    install(engine)
    runner = engine["runner"]
    if mode == "draft":
        runner.init_spec_aux_hidden_state()  # reads the draft config
    else:
        engine["model"].set_eagle3_layers_to_capture(list(ids) if ids is not None else None)
        runner.spec_aux_config = SpecAuxHiddenStateConfig()  # no draft: the runner configures nothing
    runner.init_attention_backends()  # configure_aux_hidden_state_capture (-> the setter), then the backend
    core.clear()
    return list(engine["stack"].layers_to_capture)


def generate(engine: dict, prompt: list[int], tokens: int) -> None:
    """One prefill forward of ``prompt``, hidden states captured in full as for an EAGLE-3 target."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    runner, n = engine["runner"], len(prompt)
    for pos in range(n):
        runner.req_to_token_pool.req_to_token[0, pos] = pos + 1
    batch = ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=1,
        input_ids=torch.tensor(prompt),
        req_pool_indices=torch.zeros(1, dtype=torch.int32),
        seq_lens=torch.tensor([n], dtype=torch.int32),
        seq_lens_cpu=torch.tensor([n], dtype=torch.int32),
        out_cache_loc=torch.arange(1, n + 1),
        seq_lens_sum=n,
        positions=torch.arange(n),
    )
    runner.kv_index_translator.bind_own_plan(batch)
    batch.extend_prefix_lens, batch.extend_prefix_lens_cpu = torch.zeros(1, dtype=torch.int32), [0]
    batch.extend_seq_lens, batch.extend_seq_lens_cpu = torch.tensor([n], dtype=torch.int32), [n]
    batch.extend_num_tokens = n
    batch.capture_hidden_mode = CaptureHiddenMode.FULL
    batch.attn_backend = runner.attn_backend
    with torch.no_grad(), forward_context(ForwardContext(attn_backend=runner.attn_backend), forward_batch=batch):
        runner.attn_backend.init_forward_metadata(batch)
        out = engine["model"](batch.input_ids, batch.positions, batch)
    handed = getattr(out, "hidden_states", None)
    if handed is not None and getattr(engine["model"], "capture_aux_hidden_states", False):
        core.record_fc_input(handed)


def observe(engine: dict) -> dict:
    return core.observe()
