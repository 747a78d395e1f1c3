"""Opt-in: scan real engine wheels as a new user would.

Set FLOWTRACE_REAL_ENGINES to a folder holding unpacked wheels, one ``NAME-VERSION`` folder per
release (see ``fixture_paths.real_engine``), e.g. ``pip download --no-deps sglang==0.5.23
vllm==0.33.0 -d w && unzip -q w/sglang-*.whl -d DIR/sglang-0.5.23 && unzip -q w/vllm-*.whl -d
DIR/vllm-0.33.0``. The rows asserted here were checked by reading the engines' code (see the
issue notes): they are facts about those releases, not outputs copied from flowtrace.
"""

from __future__ import annotations

import pytest

from fixture_paths import real_engine
from flowtrace import api

pytestmark = pytest.mark.real_engine


def engine(tree: str):
    return api.scan(real_engine(tree))


def test_sglang_0_5_23_rows():
    scan = engine("sglang-0.5.23")
    llama = scan.project.row("LlamaForCausalLM")
    # llama.py: layers_to_capture = [val + 1 for val in layer_ids]; capture_output handed to
    # layer i and used by attn_boundary.prepare before self_attn: the layer's input.
    assert (llama.capture.id_transform, llama.capture.point) == ("plus_one", "input")
    assert api.trace(scan, "LlamaForCausalLM", [-1, 2, 30], 32).boundaries == (0, 3, 31)
    ds = scan.project.row("DeepseekV3ForCausalLM")
    # deepseek_v2.py: "add one only if layer_ids[0] == 1", inherited by DeepseekV3
    assert ds.capture.id_transform == "conditional" and ds.capture.inherited
    assert api.trace(scan, "DeepseekV3ForCausalLM", [1, 29, 57], 61).boundaries == (2, 30, 58)
    # identity branch: -1 never matches a loop index, so the AuxHiddenStatePacker sized by
    # len(layers_to_capture) = 3 (deepseek_v2.py:3175) gets 2 states and finalize() raises
    # (layers/aux_hidden_states.py:86-89, called at deepseek_v2.py:3245)
    raised = api.trace(scan, "DeepseekV3ForCausalLM", [-1, 29, 57], 61)
    assert (raised.outcome, raised.boundaries) == ("raises", None)
    assert str(raised.raises_at) == "sglang/srt/models/deepseek_v2.py:3245"
    kimi = scan.project.row("KimiK25ForConditionalGeneration")
    assert kimi.capture.delegates_to.endswith("DeepseekV3ForCausalLM")


def test_vllm_0_33_0_rows():
    scan = engine("vllm-0.33.0")
    llama = scan.project.row("LlamaForCausalLM")
    # SupportsEagle3.set_aux_hidden_state_layers -> holder._set_aux_hidden_state_layers
    # (identity, sorted); LlamaModel labels the stream after layer idx as idx + 1.
    assert llama.capture.effective_transform == "identity" and llama.capture.point == "input"
    assert api.trace(scan, "LlamaForCausalLM", None, 32).boundaries == (2, 16, 29)
    assert api.trace(scan, "DeepseekV3ForCausalLM", [1, 29, 57], 61).boundaries == (1, 29, 57)


def test_sglang_0_5_15_rows():
    scan = engine("sglang-0.5.15")
    # llama.py:406-408: `aux_hidden_states.append(hidden_states + residual)` before layer i, with
    # residual = None (llama.py:397) at i = 0: the embedding id -1 (-> 0) raises a TypeError
    raised = api.trace(scan, "LlamaForCausalLM", [-1, 2, 30], 32)
    assert (raised.outcome, str(raised.raises_at)) == ("raises", "sglang/srt/models/llama.py:408")
    assert api.trace(scan, "LlamaForCausalLM", [0, 2, 30], 32).boundaries == (1, 3, 31)
    # qwen2.py:373-375 guards the residual, so the embedding is captured
    assert api.trace(scan, "Qwen3ForCausalLM", [-1, 2, 30], 36).boundaries == (0, 3, 31)
    # gemma3_mm.py:498-500 hands the ids to Gemma3ForCausalLM; gemma3_causal.py:658-659 captures
    # the last layer's output after the loop when num_layers is asked for (id L-1 + 1)
    assert api.trace(scan, "Gemma3ForConditionalGeneration", [0, 2, 61], 62).boundaries == (1, 3, 62)


def test_sglang_0_5_5_rows():
    scan = engine("sglang-0.5.5")
    # deepseek_v2.py:3822-3834: plain `val + 1` (the "+1 only if ids[0] == 1" rule came later)
    ds = scan.project.row("DeepseekV3ForCausalLM")
    assert ds.capture.id_transform == "plus_one"
    assert api.trace(scan, "DeepseekV3ForCausalLM", [1, 29, 57], 61).boundaries == (2, 30, 58)


def test_vllm_0_28_0_rows():
    scan = engine("vllm-0.28.0")
    # gemma4_mm.py:1106-1112 `self.language_model: Gemma4ForCausalLM = init_vllm_registered_model(
    # ..., architectures=["Gemma4ForCausalLM"])`; the interface setter reaches its .model, whose
    # helper labels the embedding 0 and the stream after layer idx as idx + 1 (gemma4.py:1311-1331)
    gemma = scan.project.row("Gemma4ForConditionalGeneration")
    assert gemma.support == "delegated"
    assert api.trace(scan, "Gemma4ForConditionalGeneration", [0, 2, 30], 30).boundaries == (0, 2, 30)
    # deepseek_v2.py:1480-1481 `hidden_states + residual` before layer idx, residual None at idx 0
    assert api.trace(scan, "DeepseekV3ForCausalLM", [0, 2, 61], 61).outcome == "raises"
    # deepseek_v2.py:1505-1506: the last layer's output is captured after the loop
    assert api.trace(scan, "DeepseekV3ForCausalLM", [2, 30, 61], 61).boundaries == (2, 30, 61)
    # the registry names the package vllm/models/kimi_k3, whose __init__ re-exports nvidia/ or
    # amd/ classes; nvidia/model.py's wrapper builds KimiLinearForCausalLM (architectures=[...]),
    # whose KimiLinearModel labels the input start_layer (1315) and idx + 1 after layer idx (1344)
    kimi = "vllm.models.kimi_k3.nvidia.model.KimiK3ForConditionalGeneration"
    assert scan.project.row(kimi).support == "delegated"
    assert api.trace(scan, kimi, [0, 2, 48], 48).boundaries == (0, 2, 48)


def test_vllm_0_20_0_rows():
    scan = engine("vllm-0.20.0")
    # deepseek_v2.py:1271-1280: captures only before layer idx, nothing after the loop
    assert api.trace(scan, "DeepseekV3ForCausalLM", [2, 30, 61], 61).boundaries == (2, 30)
    assert api.trace(scan, "Gemma4ForConditionalGeneration", None, 30).boundaries == (2, 15, 27)


def test_sglang_0_5_23_report_leads_with_the_founding_story(tmp_path):
    """deepseek_v2.py:3458: DeepseekV2ForCausalLM.set_eagle3_layers_to_capture adds one only when
    the first id is 1; DeepseekV3ForCausalLM inherits it (deepseek_v2.py:3518 `pass`) and
    KimiK25ForConditionalGeneration hands the ids to its DeepseekV3ForCausalLM (kimi_k25.py:939).
    The FT007 finding at that setter must show on both rows (JSON and the report), which were
    green "inherited" / "delegated" with 0 findings. The shipped catalogue's Kimi and DeepSeek
    drafts are served right (ids starting at 1), so alone it is a warning; with the founding
    story's own draft (SpecForge ids [-1, 2, 30] for the 61-layer Kimi-K2.5, given as a user
    catalogue file) it is an error, and both rows are flagged by it."""
    from flowtrace.render.html import build_context
    from flowtrace.render.report_data import report_document

    drafts = tmp_path / "founding.toml"
    drafts.write_text(
        '[[draft]]\nname = "founding-story/kimi-k25-eagle3"\ntarget = "moonshotai/Kimi-K2.5"\n'
        'architectures = ["KimiK25ForConditionalGeneration"]\nnum_hidden_layers = 61\ntrainer = "SpecForge"\n'
        'convention = "specforge"\nkey = "eagle_config.eagle_aux_hidden_state_layer_ids"\nids = [-1, 2, 30]\n'
        'target_hidden_size = 7168\nsource = "the founding story: trained on cat([embed_output, layer3, layer31])"\n',
        encoding="utf-8",
    )
    scan = api.scan(real_engine("sglang-0.5.23"), drafts_files=(drafts,))
    findings = api.findings(scan)
    doc = report_document(scan, findings)
    [error] = [f for f in doc["findings"] if f["rule"] == "FT007" and f["file"] == "sglang/srt/models/deepseek_v2.py"]
    assert error["severity"] == "error"
    rows = {m["class"]: m for m in doc["models"]}
    for name in ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"):
        assert error["fingerprint"] in {f["fingerprint"] for f in rows[name]["findings"]}, name
    models = {m.cls: m for m in build_context(doc)["models"]}
    assert models["DeepseekV3ForCausalLM"].flag == models["KimiK25ForConditionalGeneration"].flag == "error"
    # the oracle a reader uses: every registered target class an error or warning names in its
    # words shows that finding on its row (a draft such as an MTP head is listed by FT025 among the
    # classes reaching a setter, but a target's defect is not the draft's)
    registered = {name for name, m in rows.items() if m["registered"] and not m["draft"]}
    for f in doc["findings"]:
        if f["severity"] not in ("error", "warning"):
            continue
        named = {word for word in __import__("re").findall(r"\w+", f["message"]) if word in registered}
        shown = {name for name in named if f["fingerprint"] in {g["fingerprint"] for g in rows[name]["findings"]}}
        assert shown == named, (f["rule"], f["file"], f["line"], sorted(named - shown))
