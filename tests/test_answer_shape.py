"""One answer shape (issue 25): every row of every engine carries the same ``capture``
object in flowtrace.scan/1, whether its ids come from a setter, a config attribute or the
serving config through a metadata hook; the text matrix speaks of an "id source", not of a
setter. Expected values are read from the fixture engines' code (their docstrings)."""

from __future__ import annotations

import pytest

from fixture_paths import LMDEPLOY_LIKE, SGLANG_LIKE, TRTLLM_LIKE, VLLM_LIKE
from flowtrace import api
from flowtrace.index.build import IndexOptions
from flowtrace.render.scan_json import scan_document
from flowtrace.render.text import model_matrix

# docs/scan-json.md lists these members of every capture object.
MEMBERS = {
    "setter", "id_source", "id_transform", "transform_note", "transform_chain", "effective_transform", "delegates_to",
    "default_layers", "holder", "holder_kind", "depends_on", "capture_site", "point", "embedding_capturable",
    "last_layer_capturable", "stream", "slots", "returns", "concat_order", "pp_guard", "problems", "problem_kinds",
    "outcome", "outcome_reason", "outcome_at",
    "serving",
}  # fmt: skip
ENGINES = {
    "sglang_like": SGLANG_LIKE,
    "vllm_like": VLLM_LIKE,
    "lmdeploy_like": LMDEPLOY_LIKE,
    "trtllm_like": TRTLLM_LIKE,
}


@pytest.fixture(scope="module")
def scans():
    return {name: api.scan(root, options=IndexOptions(use_cache=False, jobs=1)) for name, root in ENGINES.items()}


def rows(scan):
    return {m["class"]: m for m in scan_document(scan)["models"]}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_capture_object_has_the_same_members(scans, engine):
    captured = [m for m in rows(scans[engine]).values() if m["capture"] is not None]
    assert captured
    for m in captured:
        assert set(m["capture"]) == MEMBERS, m["class"]
        assert m["capture"]["outcome"] in {
            "captures",
            "captures_deltas",
            "raises",
            "captures_nothing",
            "unknown",
            "refuses",
        }


def test_a_row_without_any_capture_path_keeps_a_null_capture(scans):
    # lmdeploy_like alpha_eagle3.py: the draft class itself, no id source nor capture site.
    assert rows(scans["lmdeploy_like"])["Eagle3AlphaForCausalLM"]["capture"] is None


def test_hook_rows_answer_point_embedding_and_last_layer(scans):
    models = rows(scans["trtllm_like"])
    # modeling_alpha.py: the layer calls the hook after its mlp (b = i + 1): b = 0 can never be
    # requested, id L - 1 records the last layer's output.
    alpha = models["AlphaForCausalLM"]["capture"]
    assert (alpha["point"], alpha["embedding_capturable"], alpha["last_layer_capturable"]) == ("output", False, True)
    assert alpha["setter"] is None and alpha["id_source"]["kind"] == "hook"
    assert alpha["id_source"]["label"] == "eagle3_layers_to_capture" and alpha["outcome"] == "captures"
    # modeling_beta.py: opts in, its layers never call the hook: nothing is recorded.
    beta = models["BetaForCausalLM"]["capture"]
    assert beta["outcome"] == "captures_nothing" and beta["point"] == "unknown"
    # no layer ever writes a slot
    assert (beta["embedding_capturable"], beta["last_layer_capturable"]) == (False, False)
    assert "uninitialised memory" in beta["outcome_reason"]


def test_config_rows_answer_from_their_capture_site(scans):
    # lmdeploy_like alpha.py: append before layer idx runs for idx in range(L): b = 0 yes, b = L no.
    alpha = rows(scans["lmdeploy_like"])["AlphaForCausalLM"]["capture"]
    assert (alpha["point"], alpha["embedding_capturable"], alpha["last_layer_capturable"]) == ("input", True, False)
    assert alpha["id_source"]["kind"] == "config" and alpha["id_transform"] == "ignored"


def test_setter_rows_name_their_setter_as_the_id_source(scans):
    alpha = rows(scans["sglang_like"])["AlphaForCausalLM"]["capture"]
    assert alpha["id_source"] == {
        "kind": "setter", "label": "sglang.srt.models.alpha.AlphaForCausalLM.set_eagle3_layers_to_capture",
        "at": "sglang/srt/models/alpha.py:59", "inherited": False,
    }  # fmt: skip
    assert alpha["point"] == alpha["capture_site"]["point"] == "input" and alpha["outcome"] == "captures"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_matrix_says_id_source_for_every_engine(scans, engine):
    header = model_matrix(scans[engine]).splitlines()[0]
    assert "id source" in header and "setter" not in header
