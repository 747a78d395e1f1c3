"""compat: the verdict for one deployment (target config + draft config + engine tree)."""

from __future__ import annotations

import json
from pathlib import Path
import os

import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE, VLLM_LIKE
from flowtrace import api
from flowtrace.render.compat_json import compat_json
from flowtrace.render.compat_words import differences_text
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
    assert verdict.verdict == "MATCH", differences_text(verdict)
    assert verdict.trained == (0, 3, 31) == verdict.served


def test_off_by_one_on_an_identity_engine(tmp_path, vllm_scan):
    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), specforge_draft(tmp_path, [1, 15, 28]))
    assert verdict.verdict == "MISMATCH"
    assert verdict.trained == (2, 16, 29) and verdict.served == (1, 15, 28)
    assert differences_text(verdict)[0].startswith("slot 0: trained on b=2 (output of layer 1), served b=1")


def test_embedding_requested_but_never_captured(tmp_path, sglang_scan):
    verdict = api.compat(sglang_scan, target(tmp_path, "BetaForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    assert verdict.verdict == "MISMATCH"
    assert any("trained on b=0 (embedding)" in d for d in differences_text(verdict))
    assert any("count" in d for d in differences_text(verdict))


def test_last_layer_unreachable(tmp_path, sglang_scan):
    verdict = api.compat(sglang_scan, target(tmp_path, "AlphaForCausalLM"), specforge_draft(tmp_path, [1, 15, 31]))
    assert verdict.verdict == "MISMATCH"
    assert any("b=32" in d and "served nothing" in d for d in differences_text(verdict))


def test_default_ids_on_both_sides(tmp_path, sglang_scan):
    # SpecForge default [1, L//2 - 1, L - 4] as layer outputs = boundaries [2, 16, 29];
    # Beta's own default [1, n//2 - 1, n - 4] captured after layer i names the same boundaries,
    # but beta.py records `hidden_states` alone while its layers return the residual apart:
    # every slot lacks the residual, so the only difference is that one.
    verdict = api.compat(sglang_scan, target(tmp_path, "BetaForCausalLM"), specforge_draft(tmp_path, None))
    assert verdict.verdict == "MISMATCH"
    (only,) = differences_text(verdict)
    assert only.startswith("the engine hands the draft layer outputs without the residual")
    # the same default on Alpha (plus one, recorded before layer i with the residual added) matches
    assert (
        api.compat(sglang_scan, target(tmp_path, "AlphaForCausalLM"), specforge_draft(tmp_path, None)).verdict
        == "MATCH"
    )


def test_width_and_nested_text_config(tmp_path, sglang_scan):
    verdict = api.compat(
        sglang_scan,
        target(tmp_path, "OmegaVLForConditionalGeneration", nested=True, hidden=128),
        specforge_draft(tmp_path, [1, 15, 28], hidden=64),
    )
    assert verdict.verdict == "MISMATCH"
    assert any(d.startswith("width:") for d in differences_text(verdict))


def test_trained_with_hf_index_last_index_is_after_the_final_norm(tmp_path, vllm_scan):
    draft = write(tmp_path, "draft.json", {"eagle_aux_hidden_state_layer_ids": [2, 16, 32]})
    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), draft, trained_with="hf-index")
    assert verdict.verdict == "MISMATCH"
    assert any("after the final norm" in n for n in verdict.notes)


def test_speculators_format_is_detected(tmp_path, vllm_scan):
    draft = write(
        tmp_path,
        "draft.json",
        {
            "speculators_model_type": "eagle3",
            "transformer_layer_config": {},
            "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
        },
    )
    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), draft)
    assert verdict.convention == "speculators" and verdict.verdict == "MATCH"


@pytest.mark.parametrize(
    "target_text, draft_text, message",
    [
        (None, "{}", "target config not found"),
        ("{not json", "{}", "not valid JSON"),
        ('{"architectures": ["NoSuchArch"], "num_hidden_layers": 4}', "{}", "not registered"),
        ('{"num_hidden_layers": 4}', "{}", "no 'architectures'"),
        (
            '{"architectures": ["AlphaForCausalLM"], "num_hidden_layers": 4}',
            '{"eagle_config": {"eagle_aux_hidden_state_layer_ids": "x"}}',
            "list of integers",
        ),
    ],
)
def test_unusable_input_exits_2_with_a_message(tmp_path, target_text, draft_text, message):
    t = tmp_path / "t.json"
    if target_text is not None:
        t.write_text(target_text)
    d = write(tmp_path, "d.json", draft_text)
    out = CliRunner().invoke(
        main, ["compat", str(SGLANG_LIKE), "--target-config", str(t), "--draft-config", str(d), "--no-cache"]
    )
    assert out.exit_code == 2
    assert message in out.output and "Traceback" not in out.output


def test_cli_exit_codes_and_json(tmp_path):
    runner = CliRunner()
    t = target(tmp_path, "LlamaForCausalLM")
    d = specforge_draft(tmp_path, [1, 15, 28])
    mismatch = runner.invoke(
        main,
        [
            "compat",
            str(VLLM_LIKE),
            "--target-config",
            str(t),
            "--draft-config",
            str(d),
            "--format",
            "json",
            "--no-cache",
        ],
    )
    assert mismatch.exit_code == 1
    doc = json.loads(mismatch.stdout)
    assert doc["verdict"] == "MISMATCH" and doc["served_boundaries"] == [1, 15, 28]
    match = runner.invoke(
        main,
        [
            "compat",
            str(SGLANG_LIKE),
            "--target-config",
            str(target(tmp_path, "AlphaForCausalLM")),
            "--draft-config",
            str(d),
            "--no-cache",
        ],
    )
    assert match.exit_code == 0 and match.stdout.startswith("MATCH")


# -- where and what to do: suggestions, file:line, --trained-boundaries, draft folders -----
# Expectations below come from reading the fixtures: gamma.py's setter keeps ids unchanged
# unless the first is 1 (then +1) and its layers record their input (index i = boundary i,
# the embedding guarded by Boundary.prepare); beta.py appends after layer i (boundary i + 1,
# never the embedding); vllm_like llama.py labels states start_layer and idx + 1 (index = boundary).
SGLANG_KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"


def test_suggestion_runs_the_conditional_chain(tmp_path, sglang_scan):
    verdict = api.compat(sglang_scan, target(tmp_path, "GammaForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    assert verdict.verdict == "MISMATCH"
    assert verdict.trained == (0, 3, 31) and verdict.served == (2, 30)
    first = verdict.suggestions[0]
    assert first.ids == (0, 3, 31) and first.served == (0, 3, 31) and first.key == SGLANG_KEY
    # [1, 4, 32] would take the +1 branch; [-1, 2, 30] drops -1: neither is suggested.
    assert all(s.ids not in ((1, 4, 32), (-1, 2, 30)) for s in verdict.suggestions)
    assert all(d.decided_at is not None and d.decided_at.file.endswith("gamma.py") for d in verdict.slots)


def test_suggested_ids_confirmed_with_trained_boundaries(tmp_path, sglang_scan):
    edited = specforge_draft(tmp_path, [0, 3, 31])
    t = target(tmp_path, "GammaForCausalLM")
    # Read as SpecForge layer outputs, [0, 3, 31] would mean boundaries [1, 4, 32]: a MISMATCH ...
    assert api.compat(sglang_scan, t, edited).verdict == "MISMATCH"
    # ... but the weights were trained on [0, 3, 31]; stating that gives MATCH.
    verdict = api.compat(sglang_scan, t, edited, trained_boundaries="0,3,31")
    assert verdict.verdict == "MATCH", differences_text(verdict)
    assert verdict.convention == "given" and verdict.suggestions == ()


def test_trained_boundaries_out_of_range_is_a_usage_error(tmp_path, sglang_scan):
    from flowtrace.errors import UsageError

    with pytest.raises(UsageError, match="outside 0..32"):
        api.compat(
            sglang_scan,
            target(tmp_path, "GammaForCausalLM"),
            specforge_draft(tmp_path, None),
            trained_boundaries="0,40",
        )


def test_no_ids_reach_the_embedding_names_the_capture_site(tmp_path, sglang_scan):
    # beta.py records `hidden_states` alone after layer i while its layers return the residual
    # apart: before any id question, no ids give the slots the residual (the recording blocks)
    verdict = api.compat(sglang_scan, target(tmp_path, "BetaForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    (blocked,) = verdict.suggestions
    assert blocked.ids is None and blocked.blocked_by == "stream semantics"
    assert blocked.location is not None and blocked.location.file.endswith("beta.py")
    assert "without the residual" in blocked.why
    # the embedding is still named as never requested-and-served, slot by slot
    assert any("trained on b=0 (embedding)" in d for d in differences_text(verdict))


def test_identity_engine_gets_shifted_ids(tmp_path, vllm_scan):
    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), specforge_draft(tmp_path, [1, 15, 28]))
    assert verdict.suggestions[0].ids == (2, 16, 29)
    assert verdict.suggestions[0].served == (2, 16, 29)


def test_draft_without_ids_names_both_defaults(tmp_path, vllm_scan):
    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), specforge_draft(tmp_path, None))
    # interfaces.py: (2, n // 2, n - 3) with n = 32, labels are boundaries.
    assert "[2, 16, 29]" in verdict.engine_default and "interfaces.py:" in verdict.engine_default
    # specforge.toml: [1, L // 2 - 1, L - 4] as layer outputs -> boundaries [2, 16, 29].
    assert "specforge" in verdict.training_default and "[1, 15, 28]" in verdict.training_default


def test_text_output_has_fix_and_check_lines(tmp_path):
    out = CliRunner().invoke(
        main,
        [
            "compat",
            str(SGLANG_LIKE),
            "--target-config",
            str(target(tmp_path, "GammaForCausalLM")),
            "--draft-config",
            str(specforge_draft(tmp_path, [-1, 2, 30])),
            "--no-cache",
        ],
    )
    assert out.exit_code == 1
    assert f"fix: set {SGLANG_KEY} = [0, 3, 31]" in out.stdout
    assert "--trained-boundaries 0,3,31" in out.stdout
    assert "gamma.py:" in out.stdout


def draft_dir(tmp_path, ids, fc_shape, hidden=64):
    from test_checkpoint import tensors, write_safetensors

    folder = tmp_path / "draft"
    folder.mkdir(exist_ok=True)
    data = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "target_hidden_size": hidden,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
    }
    (folder / "config.json").write_text(json.dumps(data))
    write_safetensors(
        folder / "model.safetensors",
        tensors({"fc.weight": ("BF16", fc_shape), "midlayer.mlp.up_proj.weight": ("BF16", [8, 8])}),
    )
    return folder


def test_draft_folder_width_agrees(tmp_path, vllm_scan):
    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), draft_dir(tmp_path, [1, 15, 28], [64, 192]))
    assert verdict.checkpoint.slots(64) == 3
    assert not any(d.startswith("checkpoint:") for d in differences_text(verdict))
    doc = compat_json(verdict)["draft_checkpoint"]
    assert doc["fc_in_features"] == 192 and doc["slots"] == 3 and doc["file"].endswith("model.safetensors")


def test_draft_folder_width_disagrees_with_config_and_engine(tmp_path, vllm_scan):
    # fc takes 2 x 64 although the config names 3 ids and the engine captures 3 states.
    verdict = api.compat(
        vllm_scan,
        target(tmp_path, "LlamaForCausalLM"),
        draft_dir(tmp_path, [2, 16, 29], [64, 128]),
        trained_with="boundary",
    )
    assert verdict.verdict == "MISMATCH"
    lines = [d for d in differences_text(verdict) if d.startswith("checkpoint:")]
    assert any("names 3 states" in d for d in lines) and any("engine captures 3 x 64" in d for d in lines)


def test_draft_folder_width_not_a_multiple(tmp_path, vllm_scan):
    verdict = api.compat(
        vllm_scan,
        target(tmp_path, "LlamaForCausalLM"),
        draft_dir(tmp_path, [2, 16, 29], [64, 100]),
        trained_with="boundary",
    )
    assert any("not a multiple of the target hidden size 64" in d for d in differences_text(verdict))


def test_hostile_checkpoint_is_one_line_exit_2(tmp_path):
    folder = draft_dir(tmp_path, [1, 15, 28], [64, 192])
    (folder / "model.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{}")
    out = CliRunner().invoke(
        main,
        [
            "compat",
            str(VLLM_LIKE),
            "--target-config",
            str(target(tmp_path, "LlamaForCausalLM")),
            "--draft-config",
            str(folder),
            "--no-cache",
        ],
    )
    assert out.exit_code == 2
    assert out.output.count("\n") == 1 and "flowtrace: error:" in out.output and "absurd" in out.output


def test_ids_ignored_names_the_setter(tmp_path):
    # tests/fixtures/diff/relay_v1 deaf.py: the setter always writes [2, n // 2, n - 3].
    from pathlib import Path

    from flowtrace.index.build import IndexOptions

    scan = api.scan(
        Path(__file__).parent / "fixtures" / "diff" / "relay_v1", options=IndexOptions(use_cache=False, jobs=1)
    )
    verdict = api.compat(scan, target(tmp_path, "DeafForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    assert verdict.served == (2, 16, 29)
    (blocked,) = verdict.suggestions
    assert blocked.ids is None and blocked.blocked_by == "transform"
    assert (
        "ignores the draft's ids" in blocked.why
        and blocked.location is not None
        and blocked.location.file.endswith("deaf.py")
    )


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_config_symlinked_to_a_device_is_refused(tmp_path):
    folder = tmp_path / "draft"
    folder.mkdir()
    os.symlink("/dev/zero", folder / "config.json")
    out = CliRunner().invoke(
        main,
        [
            "compat",
            str(VLLM_LIKE),
            "--target-config",
            str(target(tmp_path, "LlamaForCausalLM")),
            "--draft-config",
            str(folder),
            "--no-cache",
        ],
    )
    assert out.exit_code == 2 and "not a regular file" in out.output and out.output.count("\n") == 1


def test_each_id_followed_through_both_sides(tmp_path, vllm_scan, sglang_scan):
    # vllm_like llama: identity setter, labels = boundaries; SpecForge id i means boundary i + 1.
    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), specforge_draft(tmp_path, [1, 15, 28]))
    assert [(p.draft_id, p.trained, p.engine_index, p.served) for p in verdict.id_paths] == [
        (1, 2, 1, 1),
        (15, 16, 15, 15),
        (28, 29, 28, 28),
    ]
    # beta.py: identity, recorded after layer i (boundary i + 1); -1 never reached.
    beta = api.compat(sglang_scan, target(tmp_path, "BetaForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    assert [(p.draft_id, p.served) for p in beta.id_paths] == [(-1, None), (2, 3), (30, 31)]
    assert differences_text(beta)[0].startswith(
        "slot 0: trained on b=0 (embedding), served nothing (draft id -1 -> engine index -1)"
    )
    assert "beta.py:" in differences_text(beta)[0]


def test_json_suggestions_shape(tmp_path):
    out = CliRunner().invoke(
        main,
        [
            "compat",
            str(SGLANG_LIKE),
            "--target-config",
            str(target(tmp_path, "GammaForCausalLM")),
            "--draft-config",
            str(specforge_draft(tmp_path, [-1, 2, 30])),
            "--format",
            "json",
            "--no-cache",
        ],
    )
    doc = json.loads(out.stdout)
    first = doc["suggestions"][0]
    assert first["ids"] == [0, 3, 31] and first["key"] == SGLANG_KEY and first["served_boundaries"] == [0, 3, 31]
    assert first["why"] and doc["draft_checkpoint"] is None
    assert all(s["decided_at"] for s in doc["slots"])


# Core's fixtures (docstrings state the facts): rho.py's SlotBuffer is sized by the number of
# ids and raises when -1 leaves a slot empty; nu.py records `h + residual` unguarded before
# layer i, so index 0 raises; xi.py guards it, so the embedding is capturable.
def test_raising_engine_gets_ids_that_fill_every_slot(tmp_path, sglang_scan):
    verdict = api.compat(sglang_scan, target(tmp_path, "RhoForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    assert verdict.served is None and verdict.verdict == "MISMATCH"
    assert any(d.startswith("the engine raises:") and "rho.py:" in d for d in differences_text(verdict))
    # each id's path is still shown: -1 never recorded, 2 and 30 recorded as boundaries 2 and 30
    assert [(p.draft_id, p.served) for p in verdict.id_paths] == [(-1, None), (2, 2), (30, 30)]
    assert verdict.suggestions[0].ids == (0, 3, 31)


def test_index_0_raising_blocks_the_embedding(tmp_path, sglang_scan):
    verdict = api.compat(sglang_scan, target(tmp_path, "NuForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    (blocked,) = verdict.suggestions
    assert blocked.ids is None and blocked.blocked_by == "stream semantics"
    assert blocked.location is not None and blocked.location.file.endswith("nu.py") and "raise" in blocked.why


def test_guarded_index_0_gets_the_embedding(tmp_path, sglang_scan):
    verdict = api.compat(sglang_scan, target(tmp_path, "XiForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    assert verdict.suggestions[0].ids == (0, 3, 31)


def test_engine_that_writes_its_own_ids_names_the_builder_line(tmp_path):
    # lmdeploy_like configurations/alpha.py (docstring): for AlphaForCausalLM and 'eagle3' line 19
    # writes aux_hidden_state_layers = (2, n // 2, n - 3) itself; the draft's ids play no part.
    from flowtrace.index.build import IndexOptions

    scan = api.scan(
        Path(__file__).parent / "fixtures" / "engines" / "lmdeploy_like", options=IndexOptions(use_cache=False, jobs=1)
    )
    verdict = api.compat(scan, target(tmp_path, "AlphaForCausalLM"), specforge_draft(tmp_path, [-1, 2, 30]))
    assert verdict.verdict == "MISMATCH"
    (blocked,) = verdict.suggestions
    assert blocked.ids is None and blocked.blocked_by == "id source"
    assert blocked.location is not None and str(blocked.location).endswith("configurations/alpha.py:19")
    assert "never reads the draft's ids" in blocked.why


def test_metadata_hook_engine_suggests_serving_config_ids(tmp_path):
    # trtllm_like modeling_alpha.py (docstring): id i records layer i's output (b = i + 1), ids come
    # from the serving config, sorted. Trained on SpecForge [2, 16, 29] = boundaries [3, 17, 30]:
    # the serving config needs ids [2, 16, 29].
    from flowtrace.index.build import IndexOptions

    scan = api.scan(
        Path(__file__).parent / "fixtures" / "engines" / "trtllm_like", options=IndexOptions(use_cache=False, jobs=1)
    )
    verdict = api.compat(scan, target(tmp_path, "AlphaForCausalLM"), specforge_draft(tmp_path, [2, 16, 29]))
    first = verdict.suggestions[0]
    assert first.ids == (2, 16, 29) and first.served == (3, 17, 30)
    assert first.config == "serving config" and first.key == "eagle3_layers_to_capture"


def test_differences_are_records_the_renderer_words(tmp_path, vllm_scan):
    """The analysis states which numbers disagree; the words come from render.compat_words."""
    from flowtrace.analysis.compat import DifferenceKind

    verdict = api.compat(vllm_scan, target(tmp_path, "LlamaForCausalLM"), specforge_draft(tmp_path, [1, 15, 28]))
    # SpecForge ids 1, 15, 28 mean outputs of those layers (b = 2, 16, 29); the identity engine records b = 1, 15, 28
    slots = [d.slot for d in verdict.differences if d.kind == DifferenceKind.SLOT]
    assert [(s.trained, s.served) for s in slots] == [(2, 1), (16, 15), (29, 28)]
    assert all(isinstance(d, str) for d in differences_text(verdict))
