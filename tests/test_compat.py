"""compat: the verdict for one deployment (target config + draft config + engine tree)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE, VLLM_LIKE
from flowtrace import api
from flowtrace.cli.main import main


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def target(tmp_path, arch, layers=32, hidden=64, nested=False):
    data = {"architectures": [arch]}
    body = {"num_hidden_layers": layers, "hidden_size": hidden}
    data.update({"text_config": body} if nested else body)
    return write(tmp_path, "target.json", data)


def specforge_draft(tmp_path, ids, hidden=64):
    data = {"architectures": ["LlamaForCausalLMEagle3"], "target_hidden_size": hidden, "eagle_config": {}}
    if ids is not None:
        data["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    return write(tmp_path, "draft.json", data)


def test_match_when_engine_adds_one_like_the_training_convention(tmp_path, sglang_scan):
    verdict = api.compat(sglang_scan, target(tmp_path, "AlphaForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    assert verdict.verdict == "MATCH", verdict.differences
    assert verdict.trained == (0, 3, 31) == verdict.served


def test_off_by_one_on_an_identity_engine(tmp_path, vllm_scan):
    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), specforge_draft(tmp_path, [1, 15, 28]))
    assert verdict.verdict == "MISMATCH"
    assert verdict.trained == (2, 16, 29) and verdict.served == (1, 15, 28)
    assert verdict.differences[0].startswith("slot 0: trained on b=2 (output of layer 1), served b=1")


def test_embedding_requested_but_never_captured(tmp_path, sglang_scan):
    verdict = api.compat(sglang_scan, target(tmp_path, "BetaForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    assert verdict.verdict == "MISMATCH"
    assert any("trained on b=0 (embedding)" in d for d in verdict.differences)
    assert any("count" in d for d in verdict.differences)


def test_last_layer_unreachable(tmp_path, sglang_scan):
    verdict = api.compat(sglang_scan, target(tmp_path, "AlphaForCausalLM"), specforge_draft(tmp_path, [1, 15, 31]))
    assert verdict.verdict == "MISMATCH"
    assert any("b=32" in d and "served nothing" in d for d in verdict.differences)


def test_default_ids_on_both_sides(tmp_path, sglang_scan):
    # SpecForge default [1, L//2 - 1, L - 4] as layer outputs = boundaries [2, 16, 29];
    # Beta's own default [1, n//2 - 1, n - 4] captured after layer i gives the same.
    verdict = api.compat(sglang_scan, target(tmp_path, "BetaForCausalLM"), specforge_draft(tmp_path, None))
    assert verdict.verdict == "MATCH", verdict.differences


def test_width_and_nested_text_config(tmp_path, sglang_scan):
    verdict = api.compat(sglang_scan, target(tmp_path, "OmegaVLForConditionalGeneration", nested=True, hidden=128), specforge_draft(tmp_path, [1, 15, 28], hidden=64))
    assert verdict.verdict == "MISMATCH"
    assert any(d.startswith("width:") for d in verdict.differences)


def test_trained_with_hf_index_last_index_is_after_the_final_norm(tmp_path, vllm_scan):
    draft = write(tmp_path, "draft.json", {"eagle_aux_hidden_state_layer_ids": [2, 16, 32]})
    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), draft, trained_with="hf-index")
    assert verdict.verdict == "MISMATCH"
    assert any("after the final norm" in n for n in verdict.notes)


def test_speculators_format_is_detected(tmp_path, vllm_scan):
    draft = write(tmp_path, "draft.json", {"speculators_model_type": "eagle3", "transformer_layer_config": {}, "eagle_aux_hidden_state_layer_ids": [2, 16, 29]})
    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), draft)
    assert verdict.convention == "speculators" and verdict.verdict == "MATCH"


@pytest.mark.parametrize(
    "target_text, draft_text, message",
    [
        (None, "{}", "target config not found"),
        ("{not json", "{}", "not valid JSON"),
        ('{"architectures": ["NoSuchArch"], "num_hidden_layers": 4}', "{}", "not registered"),
        ('{"num_hidden_layers": 4}', "{}", "no 'architectures'"),
        ('{"architectures": ["AlphaForCausalLM"], "num_hidden_layers": 4}', '{"eagle_config": {"eagle_aux_hidden_state_layer_ids": "x"}}', "list of integers"),
    ],
)
def test_unusable_input_exits_2_with_a_message(tmp_path, target_text, draft_text, message):
    t = tmp_path / "t.json"
    if target_text is not None:
        t.write_text(target_text)
    d = write(tmp_path, "d.json", draft_text)
    out = CliRunner().invoke(main, ["compat", str(SGLANG_LIKE), "--target-config", str(t), "--draft-config", str(d), "--no-cache"])
    assert out.exit_code == 2
    assert message in out.output and "Traceback" not in out.output


def test_cli_exit_codes_and_json(tmp_path):
    runner = CliRunner()
    t = target(tmp_path, "LlamaForCausalLM")
    d = specforge_draft(tmp_path, [1, 15, 28])
    mismatch = runner.invoke(main, ["compat", str(VLLM_LIKE), "--target-config", str(t), "--draft-config", str(d), "--format", "json", "--no-cache"])
    assert mismatch.exit_code == 1
    doc = json.loads(mismatch.stdout)
    assert doc["verdict"] == "MISMATCH" and doc["served_boundaries"] == [1, 15, 28]
    match = runner.invoke(main, ["compat", str(SGLANG_LIKE), "--target-config", str(target(tmp_path, "AlphaForCausalLM")), "--draft-config", str(d), "--no-cache"])
    assert match.exit_code == 0 and match.stdout.startswith("MATCH")
