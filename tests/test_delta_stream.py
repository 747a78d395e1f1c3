"""A delta stream: the loop records `hidden_states` alone while its layers return the residual apart.

Expected values are written from reading tests/fixtures/engines/shapes_like/sglang/srt/models/delta_stream.py:
the setter writes ids + 1 (default [2, L // 2, L - 3]); the loop records `hidden_states` before
layer i when i is listed and once after the loop for index L; index 0 is the embedding (the
stream itself), any index i > 0 is what layer i - 1 returned first (its MLP output, the residual
returned apart and never added back)."""

from __future__ import annotations

import pytest

from fixture_paths import FIXTURES
from flowtrace import api
from flowtrace.analysis.boundaries import Slot
from flowtrace.analysis.trace import trace_json
from flowtrace.index.build import IndexOptions
from flowtrace.model import facts as F

SHAPES_LIKE = FIXTURES / "shapes_like"
FILE = "sglang/srt/models/delta_stream.py"
L, H = 8, 16


@pytest.fixture(scope="module")
def scan():
    return api.scan(SHAPES_LIKE, options=IndexOptions(use_cache=False, jobs=1))


def _line(text: str) -> int:
    source = (SHAPES_LIKE / FILE).read_text().splitlines()
    return next(n for n, line in enumerate(source, 1) if text in line)


@pytest.mark.parametrize("model", ["DeltaForCausalLM", "DeltaForConditionalGeneration"])
def test_slots_past_the_embedding_hold_a_layer_output_without_the_residual(scan, model):
    # ids [-1, 3, 7] -> indices [0, 4, 8]: the embedding, layer 3's output, layer 7's output (after the loop)
    traced = api.trace(scan, model, [-1, 3, 7], L, H)
    assert traced.outcome == F.Outcome.CAPTURES_DELTAS
    assert traced.slots == (Slot(0), Slot(None, 3), Slot(None, 7))
    assert traced.boundaries is None  # no boundary list describes what the draft gets
    assert traced.fc_in_features == 3 * H
    assert "layers 3, 7 without the residual" in (traced.reason or "")
    stream = next(s for s in traced.steps if s.kind == "stream")
    assert stream.location == F.Location(FILE, _line("aux_hidden_states.append(hidden_states)"))


def test_the_default_names_three_layer_outputs(scan):
    # default [2, 4, 5] (L // 2 = 4, L - 3 = 5): what layers 1, 3 and 4 return first, in loop order
    doc = trace_json(api.trace(scan, "DeltaForCausalLM", None, L, H))
    assert doc["outcome"] == "captures_deltas" and doc["boundaries"] is None
    assert doc["slots"] == [{"boundary": None, "layer_value_of": k} for k in (1, 3, 4)]
    assert doc["fc_in_features"] == 3 * H


def test_a_stream_that_adds_the_residual_still_captures_boundaries(scan):
    # base_lm.py records `hidden_states + residual` before layer i: ids [0, 2, 5] -> boundaries [1, 3, 6]
    traced = api.trace(scan, "BaseForCausalLM", [0, 2, 5], L, H)
    assert traced.outcome == F.Outcome.CAPTURES and traced.boundaries == (1, 3, 6)
    assert traced.slots == (Slot(1), Slot(3), Slot(6))


def test_the_missing_residual_is_an_error_at_the_recording(scan):
    found = [f for f in api.findings(scan) if f.rule == "FT013" and f.file == FILE]
    assert [(f.line, f.severity) for f in found] == [(_line("aux_hidden_states.append(hidden_states)"), "error")]


def test_compat_says_mismatch_and_names_the_layer_outputs(scan, tmp_path):
    # a SpecForge-style draft naming ids [1, 15, 28] was trained on b = [2, 16, 29]; the engine
    # (setter + 1, the loop's recording) hands it what layers 1, 15 and 28 return first
    import json

    from flowtrace.analysis.compat import DifferenceKind

    target, draft = tmp_path / "target.json", tmp_path / "draft.json"
    target.write_text(
        json.dumps({"architectures": ["DeltaForConditionalGeneration"], "num_hidden_layers": 32, "hidden_size": 64})
    )
    draft.write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64,
                                 "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}))
    result = api.compat(scan, target, draft)
    assert result.verdict == "MISMATCH"
    assert result.trace.outcome == F.Outcome.CAPTURES_DELTAS
    assert result.trace.slots == (Slot(None, 1), Slot(None, 15), Slot(None, 28))
    assert [d.kind for d in result.differences] == [DifferenceKind.DELTAS]


def test_the_matrix_row_says_captures_deltas_at_the_recording(scan):
    # the scan JSON's row answer must not say `captures` where every trace past the embedding
    # hands the draft layer outputs without the residual (the recording line is the place)
    from flowtrace.render.scan_json import model_json

    for model in ("DeltaForCausalLM", "DeltaForConditionalGeneration"):
        capture = model_json(scan.model(model), scan.project)["capture"]
        assert capture["outcome"] == "captures_deltas"
        assert capture["outcome_at"] == f"{FILE}:{_line('aux_hidden_states.append(hidden_states)')}"
        assert "without the residual" in capture["outcome_reason"]
