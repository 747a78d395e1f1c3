"""Trace outcomes as probe claims: raises (at a site), captures_nothing, and the run's own outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowtrace.probe.claims import compare_outcome, frame_matches, load_trace_claim
from flowtrace.probe.errors import ProbeError
from flowtrace.probe.results import ChunkMatch, Claim, Observation, Raised

HERE = Path(__file__).parent
SHAPES = HERE / "agreement_engines" / "shapes"


@pytest.mark.parametrize(
    "site,frame,hit",
    [
        ("sglang/srt/models/rho.py:18", "/x/tree/sglang/srt/models/rho.py:18", True),
        ("sglang/srt/models/rho.py:18", "/x/tree/sglang/srt/models/rho.py:19", False),
        ("models/rho.py:17-19", "/x/sglang/srt/models/rho.py:19", True),
        ("models/rho.py:17-19", "/x/sglang/srt/models/rho.py:20", False),
        ("rho.py:18", "/x/sglang/srt/models/xrho.py:18", False),  # suffix on path parts only
        ("rho.py", "/x/rho.py:18", False),
    ],
)
def test_a_raises_site_names_a_frame_by_path_suffix_and_line(site, frame, hit):
    assert frame_matches(site, frame) is hit


def _raised(*frames: str) -> Raised:
    return Raised("TypeError", "unsupported operand", tuple(frames))


def test_raises_claim_confirmed_at_the_site_refuted_elsewhere_or_without_a_raise():
    claim = Claim("t.json", (), outcome="raises", raises_at="m/rho.py:18")
    assert compare_outcome(claim, _raised("/a/m/rho.py:40", "/a/m/rho.py:18"), None)[1] == "confirmed"
    slots, verdict = compare_outcome(claim, _raised("/a/m/rho.py:40"), None)
    assert verdict == "refuted" and "not at m/rho.py:18" in slots[0].evidence
    assert compare_outcome(claim, None, None)[1] == "refuted"


def test_captures_nothing_claim():
    claim = Claim("t.json", (), outcome="captures_nothing")
    assert compare_outcome(claim, None, None)[1] == "confirmed"
    seen = Observation("torch.cat call #1", "concat", (ChunkMatch(0, 3, "stream", "exact", True),))
    assert compare_outcome(claim, None, seen)[1] == "refuted"
    assert compare_outcome(claim, _raised("/a.py:1"), None)[1] == "refuted"


def test_a_delta_claim_loads_its_slots_and_is_judged_on_the_hidden_part(tmp_path):
    # a trace slot with layer_value_of k is the hidden part of layer k's split value, seen at b = k + 1
    trace = tmp_path / "t.json"
    slots = [{"boundary": 0, "layer_value_of": None}, {"boundary": None, "layer_value_of": 3}]
    trace.write_text(json.dumps({"boundaries": None, "outcome": "captures_deltas", "slots": slots}))
    claim = load_trace_claim(str(trace))
    assert (claim.outcome, claim.boundaries, claim.deltas) == ("captures_deltas", (0, 4), (False, True))
    hidden = "hidden part only (residual not added)"
    seen = Observation(
        "concat", "concat", (ChunkMatch(0, 0, "stream", "exact", True, (0,)), ChunkMatch(1, 4, hidden, "exact", False))
    )
    assert compare_outcome(claim, None, seen)[1] == "confirmed"
    # the stream at b=4 instead, or the hidden part of another layer: refuted
    stream = Observation(
        "concat", "concat", (ChunkMatch(0, 0, "stream", "exact", True, (0,)), ChunkMatch(1, 4, "stream", "exact", True))
    )
    assert compare_outcome(claim, None, stream)[1] == "refuted"
    other = Observation(
        "concat", "concat", (ChunkMatch(0, 0, "stream", "exact", True, (0,)), ChunkMatch(1, 5, hidden, "exact", False))
    )
    assert compare_outcome(claim, None, other)[1] == "refuted"
    trace.write_text(json.dumps({"boundaries": None, "outcome": "captures_deltas", "slots": []}))
    with pytest.raises(ProbeError, match="needs a non-empty"):
        load_trace_claim(str(trace))


def test_a_captures_claim_is_refuted_by_a_raise():
    slots, verdict = compare_outcome(Claim("t.json", (0, 2)), _raised("/a/rho.py:18"), None)
    assert verdict == "refuted" and "raised TypeError" in slots[0].evidence


def test_trace_json_outcomes_load(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"model": "M", "boundaries": None, "outcome": "raises",
                             "raises_at": "m.py:3", "layer_ids": [-1, 2]}))
    c = load_trace_claim(str(f))
    assert (c.outcome, c.raises_at, c.boundaries, c.layer_ids) == ("raises", "m.py:3", (), (-1, 2))
    f.write_text(json.dumps({"boundaries": [1, 2]}))  # a trace from before outcomes existed
    assert load_trace_claim(str(f)).outcome == "captures"
    f.write_text(json.dumps({"boundaries": None, "outcome": "unknown", "reason": "holder is dynamic"}))
    with pytest.raises(ProbeError, match="could not decide the outcome \\(holder is dynamic\\)"):
        load_trace_claim(str(f))
    f.write_text(json.dumps({"boundaries": [1], "outcome": "maybe"}))
    with pytest.raises(ProbeError, match="not one of"):
        load_trace_claim(str(f))


@pytest.mark.probe
def test_cli_confirms_a_raise_at_the_claimed_site_and_reports_it(tmp_path):
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from flowtrace.probe.cli import probe

    claim = tmp_path / "t.json"
    claim.write_text(json.dumps({"model": "NoneResidualForCausalLM", "boundaries": None, "outcome": "raises",
                                 "raises_at": "sglang/srt/models/none_residual.py:18"}))
    args = [
        "capture",
        "--path",
        str(HERE),
        "--factory",
        "fixture_runtime:build",
        "--factory-arg",
        f"root={SHAPES}",
        "--factory-arg",
        "qualname=sglang.srt.models.none_residual.NoneResidualForCausalLM",
        "--factory-arg",
        "num_layers=8",
        "--factory-arg",
        "layer_ids=[-1,3,4]",
        "--factory-arg",
        "setter=set_eagle3_layers_to_capture",
        "--device",
        "cpu",
    ]
    r = CliRunner().invoke(probe, [*args, "--expect-trace", str(claim)])
    assert r.exit_code == 0, r.output
    assert "outcome: raises (TypeError" in r.stdout and "none_residual.py:18" in r.stdout
    assert "claim (" in r.stdout and "raises at sglang/srt/models/none_residual.py:18" in r.stdout
    r = CliRunner().invoke(probe, args)  # no claim: a raising forward is an error, one line
    assert r.exit_code == 2 and "the target's forward raised TypeError" in r.output
