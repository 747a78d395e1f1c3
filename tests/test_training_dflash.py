"""The DFlash training convention (rules/training/dflash.toml) and the layout expressions it needs.

A DFlash draft trained without explicit ids takes one target layer per draft layer, spread from
layer 1 to layer L - 3 with Python's round (SpecForge's build_target_layer_ids). SpecForge writes
the ids it trained on into every config it ships, so its published configs pin the default: each
expectation below is the ``dflash_config.target_layer_ids`` of a SpecForge config at a6b6b02
(configs/<name>.json) whose draft has N = num_hidden_layers = 5 and whose target has
L = num_target_layers layers.
"""

from __future__ import annotations

import pytest

from flowtrace.engines.training import LayoutError, layout, load_conventions, needs_draft_layers, to_boundaries


@pytest.fixture(scope="module")
def dflash():
    return load_conventions()["dflash"]


@pytest.mark.parametrize(("config", "layers", "ids"), [
    ("qwen3-8b-dflash", 36, (1, 9, 17, 25, 33)),
    ("qwen2.5-0.5b-dflash", 24, (1, 6, 11, 16, 21)),
    ("longcat-flash-dflash", 28, (1, 7, 13, 19, 25)),
    ("qwen3.5-4b-dflash", 32, (1, 8, 15, 22, 29)),
    ("qwen3.6-27b-dflash", 64, (1, 16, 31, 46, 61)),
])
def test_the_default_is_the_layout_specforge_wrote_into_its_configs(dflash, config, layers, ids):
    assert layout(dflash.default_ids, layers, 5) == ids, config


def test_one_draft_layer_takes_the_middle_layer_and_rounding_halves_to_even(dflash):
    assert layout(dflash.default_ids, 32, 1) == (16,)
    # L = 16, N = 8: 1 + i * 12 / 7 = 1, 2.71, 4.43, 6.14, 7.86, 9.57, 11.29, 13
    assert layout(dflash.default_ids, 16, 8) == (1, 3, 4, 6, 8, 10, 11, 13)
    assert layout("[round(5 / 2), round(7 / 2)]", 32) == (2, 4)  # round half to even, as Python's round


def test_the_convention_reads_output_of_layer_i_under_dflash_keys(dflash):
    # extract_context_feature takes hidden_states[id + 1]: the output of layer id, boundary id + 1
    assert dflash.meaning == "layer_output"
    assert dflash.layer_id_keys == ("dflash_config.target_layer_ids", "target_layer_ids")
    assert to_boundaries(dflash.meaning, [1, 8, 15], 32)[0] == (2, 9, 16)
    assert needs_draft_layers(dflash.default_ids)
    assert not needs_draft_layers(load_conventions()["specforge"].default_ids)


@pytest.mark.parametrize(("expression", "words"), [
    ("[N]", "needs N"),
    ("[L / 3]", "must be integers"),
    ("[x for x in range(3) if x]", "comprehension"),
    ("[open(L)]", "only integers"),
    ("[1] if L else [2]", "one comparison"),
])
def test_a_layout_outside_the_small_language_is_a_layout_error(expression, words):
    with pytest.raises(LayoutError, match=words):
        layout(expression, 32)
