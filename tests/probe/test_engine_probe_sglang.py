"""`flowtrace probe engine --engine sglang` on the real engine: SGLang 0.5.23's own model code on CPU.

Opt-in: these run when FLOWTRACE_SGLANG_VENV names the engine venv that
`scripts/install-engine-venv.sh sglang` builds (.ci/run does both when the venv installs); elsewhere
they skip and say so. Each architecture runs in one engine process (the runner script starts a
fresh server per case, so a raise does not end the process) with a 4-layer random checkpoint of its
own architecture. Every expectation below was written from reading SGLang 0.5.23's source (paths
relative to site-packages/sglang/srt), never from the probe's output.

SGLang 0.5.23 conventions these expectations rest on:
- the ids reach the setter from the draft config's eagle_config.eagle_aux_hidden_state_layer_ids
  (model_executor/model_runner_components/spec_aux_hidden_state.py:186-196, a draft without the
  key gives None), through configure_aux_hidden_state_capture
  (model_executor/model_runner_components/attention_backend_setup.py:61), which
  ModelRunner.init_attention_backends calls (model_executor/model_runner.py:1108-1116);
- the Llama-family setters store [val + 1 for val in layer_ids], or [2, L // 2, L - 3] without ids
  (models/llama.py:933-941, models/qwen3.py:781-794): with L = 4 the default is [2, 2, 1];
- their loops hand `capture_output` to layer i when i is listed (models/llama.py:487-495), and the
  layer records its input stream before attention (models/llama.py:402-404): index i is boundary i,
  so the loop over 0..L-1 never records b = L and an id of the last layer (L - 1 -> L) is dropped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine_probe

CONFIGS = Path(__file__).parent / "engine_configs"
HIDDEN = 64  # the runner's shrunk hidden size
VENV = os.environ.get("FLOWTRACE_SGLANG_VENV")
if not VENV:
    pytest.skip("SGLang engine-probe tests are opt-in: set FLOWTRACE_SGLANG_VENV to the venv that "
                "`scripts/install-engine-venv.sh sglang` builds (.ci/run does)", allow_module_level=True)
if not Path(VENV, "bin", "python").exists():  # asked for and absent: a failure, never a skip
    raise RuntimeError(f"FLOWTRACE_SGLANG_VENV={VENV} has no bin/python: run scripts/install-engine-venv.sh sglang")

from flowtrace.probe.engine import Case, probe_engine  # noqa: E402

A, B = (1, 2, 3), (0, 1, 2)  # A names the last layer (id 3 = b 4), B three inner layers
CASES = [Case("a", "draft", A), Case("b", "draft", B), Case("default", "draft", None)]
_RESULTS: dict[str, list] = {}


def _run(name: str, cases: list = CASES) -> list:
    """One engine process per architecture and case list."""
    key = f"{name}:{','.join(c.name for c in cases)}"
    if key not in _RESULTS:
        _RESULTS[key] = probe_engine(engine="sglang", target_config=CONFIGS / f"{name}.json", cases=cases,
                                     engine_python=str(Path(VENV, "bin", "python")))
    return [r.doc for r in _RESULTS[key]]


def _seen(doc: dict) -> list:
    return [s["boundary"] for s in doc["observed"]["slots"]]


# Expected boundaries per architecture for A, B and the draft config without ids, or "raises".
AGREE = {
    # A: [2, 3, 4], index 4 never met by range(0, 4); B: [1, 2, 3]; default [2, 2, 1] -> 1, 2 in loop order
    "llama": ([2, 3], [1, 2, 3], [1, 2]),
    # models/qwen3.py:781-794 (the same +1 setter); Qwen2DecoderLayer records its input (models/qwen2.py:337-339)
    "qwen3": ([2, 3], [1, 2, 3], [1, 2]),
    # models/mistral.py:33 MistralForCausalLM(LlamaForCausalLM): Llama's setter and loop
    "mistral": ([2, 3], [1, 2, 3], [1, 2]),
    # models/qwen3_moe.py:1128-1143 hands [val + 1] to Qwen2MoeModel.set_eagle3_layers_to_capture, which
    # marks self.layers[layer_id] (models/qwen2_moe.py:1153-1156): layer 4 of 4 is an IndexError there.
    # Without ids it marks layers 2, 2, 1; the loop hands the collector to a marked layer
    # (models/qwen2_moe.py:1195-1203), which records its input (qwen2_moe.py:1080)
    "qwen3_moe": ("raises", [1, 2, 3], [1, 2]),
}


@pytest.mark.parametrize("name", sorted(AGREE))
def test_runtime_agrees_with_the_static_trace(name):
    for doc, want in zip(_run(name), AGREE[name]):
        assert doc["schema"] == "flowtrace.probe-engine/1" and doc["engine"] == "sglang"
        assert doc["engine_version"] == "0.5.23" and doc["num_layers"] == 4
        assert doc["agree"], doc
        if want == "raises":
            assert doc["observed"]["outcome"] == "raises" and doc["static"]["outcome"] == "raises"
            continue
        assert _seen(doc) == want
        assert doc["static"]["boundaries"] == want and doc["static"]["outcome"] == "captures"
        assert all(sl["agree"] for sl in doc["slots"])


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_the_runner_hands_the_draft_ids_to_the_setter_which_adds_one(name):
    a, b, default = _run(name)
    assert a["observed"]["engine_layers"] == [2, 3, 4]  # [val + 1 for val in [1, 2, 3]]
    assert b["observed"]["engine_layers"] == [1, 2, 3]
    assert default["observed"]["engine_layers"] == [2, 2, 1]  # no ids in the draft config: the setter's default
    # every case is its own server start: the runner's methods ran as at load, never re-run on a used model
    assert {d["observed"]["plumbing"] for d in (a, b, default)} == {"load"}


def test_an_id_of_the_last_layer_is_dropped_and_the_fc_gets_fewer_states():
    a, b, _ = _run("llama")
    # index 4 is never a loop index (range(0, 4)): two states reach the draft, whose fc expects three
    fc = a["observed"]["fc_input"]
    assert fc["width"] == 2 * HIDDEN and fc["expected"] == 3 * HIDDEN and fc["matches"] is False
    assert fc["slots"] == [2, 3]
    assert a["static"]["fc_in_features"] == 2 * HIDDEN
    # the logits processor hands the draft the captured states side by side, in loop order
    assert b["observed"]["fc_input"]["slots"] == [1, 2, 3] and b["observed"]["fc_input"]["matches"]


def test_the_setter_raise_is_located_where_the_static_trace_says():
    a = _run("qwen3_moe")[0]
    assert a["observed"]["raised_at"] == a["static"]["raises_at"] == "sglang/srt/models/qwen2_moe.py:1156"
    assert a["observed"]["message"].startswith("IndexError")


def test_direct_mode_calls_the_models_setter_without_a_draft():
    (doc,) = _run("llama", [Case("direct", "direct", (0, 1, 2))])
    assert doc["mode"] == "direct" and doc["agree"]
    assert doc["observed"]["engine_layers"] == [1, 2, 3]
    assert _seen(doc) == [1, 2, 3] and doc["observed"]["fc_input"] is not None


def test_every_change_made_for_the_cpu_is_reported():
    doc = _run("llama")[0]
    shrunk = {s["key"]: (s["from"], s["to"]) for s in doc["shrunk"]}
    # tests/probe/engine_configs/llama.json: 32 layers, hidden 4096, 32 heads / 8 kv heads
    assert shrunk["num_hidden_layers"] == (32, 4) and shrunk["hidden_size"] == (4096, HIDDEN)
    assert shrunk["num_key_value_heads"] == (8, 1)


def test_the_wrapper_delegates_and_its_text_model_records_the_layer_output_without_the_residual():
    # models/gemma3_mm.py:543-545: Gemma3ForConditionalGeneration hands the ids to its language model
    # (Gemma3ForCausalLM, the +1 setter, models/gemma3_causal.py:917-927); Gemma3TextModel records
    # `hidden_states` before layer i (models/gemma3_causal.py:657; :639 on a CPU with AMX) and after the
    # loop for index L (:671-672), while its layers return (hidden_states, residual) apart (:408-412):
    # what is recorded is what the previous layer returned first (its output after
    # post_feedforward_layernorm), never the residual stream. The static trace says the same
    # (outcome captures_deltas, each slot the layer whose output it is), slot by slot.
    for doc, layers, values in zip(_run("gemma3"), ([2, 3, 4], [1, 2, 3], [2, 2, 1]), ([1, 2, 3], [0, 1, 2], [0, 1])):
        assert doc["model_class"] == "Gemma3ForConditionalGeneration"
        assert doc["observed"]["engine_layers"] == layers
        assert doc["observed"]["outcome"] == "captures_deltas"
        assert [s["boundary"] for s in doc["observed"]["slots"]] == [None] * len(values)
        assert [s["layer_value_of"] for s in doc["observed"]["slots"]] == values
        assert doc["static"]["outcome"] == "captures_deltas" and doc["static"]["boundaries"] is None
        assert doc["static"]["slots"] == [{"boundary": None, "layer_value_of": k} for k in values]
        assert doc["agree"] and all(sl["agree"] for sl in doc["slots"])
