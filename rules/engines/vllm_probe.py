"""vLLM's engine runner script for ``flowtrace probe engine`` (the profile's ``[probe] runner``).

Package data, not flowtrace code: the engine venv's python runs it through flowtrace's
engine-neutral runner (flowtrace/probe/engine_runner.py), which sets ``core`` to itself before
this file runs. This is the only code that calls vLLM's own Python API: the offline ``LLM``, the
worker's model runner reached through ``collective_rpc`` (in-process: the profile sets
``VLLM_ENABLE_V1_MULTIPROCESSING=0``), the runner's draft-config-to-setter plumbing
``_setup_eagle3_aux_hidden_state_outputs`` (v1/worker/gpu_model_runner.py, which the CPU model
runner inherits, for EAGLE-3 and DFlash drafts alike) and the drafter's ``combine_hidden_states``
(the fc entry of an EAGLE-3 or DFlash draft).

Interface (called by the core): ``version()``, ``start(ctx)``, ``install(engine)``,
``set_ids(engine, mode, ids, key)``, ``generate(engine, prompt, tokens)``, ``observe(engine)``.
"""

from __future__ import annotations

from typing import Any

core: Any = None  # flowtrace/probe/engine_runner.py, set before this module runs
probe: dict = {}  # the profile's [probe] settings, as the host passed them (id_keys, package, ...)
STATE: dict[str, Any] = {}


def version() -> str:
    import vllm

    return str(vllm.__version__)


def start(ctx: dict) -> Any:
    """``LLM(...)`` on the tiny target (and draft), with what the device's backends accept."""
    from vllm import LLM

    kw: dict[str, Any] = {"model": ctx["target"], "dtype": "bfloat16", "enforce_eager": True, "max_model_len": 128,
                          "max_num_seqs": 1, "seed": 0, "gpu_memory_utilization": 0.3}  # GPU attention wants 16-bit
    if ctx["device"] == "cpu":
        kw.pop("gpu_memory_utilization")
        kw["dtype"] = "float32"
        if ctx["latent_attention"]:  # the CPU latent-attention (AMX) backend packs 16-bit weights only
            kw["dtype"] = "bfloat16"
            ctx["shrunk"].append({"key": "dtype", "from": "float32", "to": "bfloat16"})
    if isinstance(ctx["config"].get("text_config"), dict):
        kw["limit_mm_per_prompt"] = {"image": 0, "video": 0}
    if ctx["draft"]:
        # the method's word from the profile ([methods.*] probe_engine_method): eagle3, dflash
        kw["speculative_config"] = {"method": probe.get("method") or "eagle3", "model": ctx["draft"],
                                    "num_speculative_tokens": 2}
    return LLM(**kw)


def _find_stack(top: Any) -> Any:
    """The module that owns the decoder layers and the capture indices (the engine's holder)."""
    for mod in top.modules():
        if hasattr(mod, "aux_hidden_state_layers") and hasattr(mod, "layers"):
            return mod
    raise RuntimeError(f"no module of {type(top).__name__} has both `layers` and `aux_hidden_state_layers`")


def _install(worker: Any) -> dict:
    runner = worker.model_runner
    top = runner.model if hasattr(runner, "model") else runner.get_model()
    stack = _find_stack(top)
    STATE.update(runner=runner, top=top, stack=stack)
    core.record_stack(stack, stack.layers)
    drafter = getattr(runner, "drafter", None) or getattr(runner, "speculator", None)  # v1 / v2 model runner
    dm = getattr(drafter, "model", None)
    fc_width = None
    if dm is not None and hasattr(dm, "combine_hidden_states"):
        core.record_fc(dm, "combine_hidden_states")
        fc = getattr(getattr(dm, "model", dm), "fc", None)
        fc_width = getattr(fc, "input_size", None) or getattr(fc, "in_features", None)
    return {"model_class": type(top).__name__, "stack_class": type(stack).__name__, "num_layers": len(stack.layers),
            "has_drafter": dm is not None, "fc_width": fc_width, "aux_layers": list(stack.aux_hidden_state_layers)}


def install(engine: Any) -> dict:
    return engine.collective_rpc(_install)[0]


def _drop(hf: Any, key: str) -> None:
    head, _, tail = key.partition(".")
    if not tail:
        if hasattr(hf, head):
            delattr(hf, head)
        return
    table = dict(getattr(hf, head, None) or {})
    table.pop(tail, None)
    setattr(hf, head, table)


def _put(hf: Any, key: str, ids: list) -> None:
    head, _, tail = key.partition(".")
    if not tail:
        setattr(hf, head, list(ids))
        return
    table = dict(getattr(hf, head, None) or {})
    table[tail] = list(ids)
    setattr(hf, head, table)


def _set_ids(worker: Any, mode: str, ids: list | None, key: str) -> list:
    """Hand the ids over: through vLLM's draft-config plumbing (mode draft) or the model's setter."""
    runner = STATE["runner"]
    if mode == "draft":
        hf = runner.speculative_config.draft_model_config.hf_config
        for k in probe["id_keys"]:  # where vLLM reads a draft's ids: [draft] layer_id_keys
            _drop(hf, k)
        if ids is not None:
            _put(hf, key, ids)
        runner._setup_eagle3_aux_hidden_state_outputs()
    else:
        runner.use_aux_hidden_state_outputs = True
        runner.model.set_aux_hidden_state_layers(tuple(ids or ()))
    core.clear()
    return list(STATE["stack"].aux_hidden_state_layers)


def set_ids(engine: Any, mode: str, ids: list | None, key: str) -> list:
    return engine.collective_rpc(_set_ids, args=(mode, ids, key))[0]


def generate(engine: Any, prompt: list[int], tokens: int) -> None:
    from vllm import SamplingParams

    engine.generate([{"prompt_token_ids": prompt}], SamplingParams(max_tokens=tokens, temperature=0), use_tqdm=False)


def observe(engine: Any) -> dict:
    return engine.collective_rpc(core.observe)[0]
