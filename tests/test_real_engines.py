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
