"""Hook engines (issue 25 item 4) on tests/fixtures/engines/trtllm_like: every registered
class answers, opted in or not; one-model and two-model paths; ids no layer matches still
take a buffer slot. Expectations are read from the fixture modules' docstrings and code."""

from __future__ import annotations

import pytest

from fixture_paths import TRTLLM_LIKE
from flowtrace import api
from flowtrace.analysis.trace import trace_row
from flowtrace.index.build import IndexOptions
from flowtrace.model import facts as F
from flowtrace.render.scan_json import scan_document


@pytest.fixture(scope="module")
def scan():
    return api.scan(TRTLLM_LIKE, options=IndexOptions(use_cache=False, jobs=1))


def test_a_model_that_does_not_opt_in_captures_on_the_two_model_path(scan):
    # modeling_gamma.py: GammaDecoderLayer calls the hook after its mlp; GammaForCausalLM
    # subclasses the plain DecoderModelForCausalLM.
    gamma = scan.project.row("GammaForCausalLM")
    assert gamma.support == "supported" and gamma.chain.serving.modes == ("two_model",)
    assert "two-model path only" in gamma.chain.production.decision.reason
    assert scan.project.row("AlphaForCausalLM").chain.serving.modes == ("one_model", "two_model")
    t = trace_row(scan.project, gamma, [2, 30], 32)
    assert t.boundaries == (3, 31)


def test_a_registered_file_without_markers_still_gets_a_row(scan):
    # modeling_delta.py names none of the profile's markers; it registers DeltaForCausalLM.
    delta = scan.project.row("DeltaForCausalLM")
    assert delta is not None and delta.registered
    row = {m["class"]: m for m in scan_document(scan)["models"]}["DeltaForCausalLM"]["capture"]
    assert row["outcome"] == "captures_nothing" and "uninitialised memory" in row["outcome_reason"]
    assert (row["point"], row["embedding_capturable"], row["last_layer_capturable"]) == ("unknown", False, False)


def test_ids_matching_no_layer_still_take_a_buffer_slot(scan):
    # modeling_alpha.py, L = 32: id 40 is no layer; id -1 is the post-final-norm slot; id 2 is b = 3.
    t = trace_row(scan.project, scan.project.row("AlphaForCausalLM"), [2, 40, -1], 32, hidden_size=8)
    assert t.boundaries == (3,) and t.outcome == F.Outcome.CAPTURES
    assert t.extra_slots == 2 and t.fc_in_features == 3 * 8
    assert any("uninitialised memory" in why and "nothing raises" in why for i, why in t.dropped if i == 40)
