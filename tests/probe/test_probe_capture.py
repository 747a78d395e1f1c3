"""``flowtrace probe capture`` on tiny targets wired the ways engines wire EAGLE-3 aux states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.probe
torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from flowtrace.probe.cli import probe  # noqa: E402

HERE = Path(__file__).parent


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # tiny models: threads only add contention on a shared 2-core machine
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def run(*args: str):
    return CliRunner().invoke(probe, ["capture", "--path", str(HERE), *args])


def capture_json(factory: str, *args: str) -> tuple[int, dict]:
    r = run("--factory", f"probe_tiny_targets:{factory}", "--format", "json", *args)
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


CASES = [
    # factory, factory args, expected boundaries (what the engine really feeds)
    ("make_hf", (), [0, 2, 4]),  # hidden_states[id+1] for ids -1, 1, 3
    ("make_split", (), [0, 2, 4]),  # inputs of layers 0, 2, 4 (hidden + residual)
    ("make_engine", (), [0, 2, 4]),  # ids -1, 1, 3 -> +1 -> inputs of layers 0, 2, 4
    ("make_engine_identity", (), [0, 2, 3]),  # ids 0, 2, 3 without the +1
    ("make_engine_capture_output", (), [2, 4, 5]),  # +1 and captures outputs
    ("make_spec_wrapper", (), [1, 2, 5]),  # copy_ into a buffer, seen at draft.fc
    ("make_engine", ("--factory-arg", "layer_ids=[0,2,3]"), [1, 3, 4]),
]


@pytest.mark.parametrize("factory,extra,expected", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_names_the_captured_boundaries_and_confirms_them(factory, extra, expected):
    code, data = capture_json(factory, *extra, "--expect", ",".join(map(str, expected)))
    assert data["schema"] == "flowtrace.probe/1"
    assert data["boundaries"] == expected
    assert data["verdict"] == "confirmed"
    assert code == 0
    primary = data["observations"][data["primary_observation"]]
    assert all(c["match"] == "exact" and c["confirmed"] for c in primary["chunks"])
    assert [s["verdict"] for s in data["slots"]] == ["confirmed"] * len(expected)


@pytest.mark.parametrize(
    "factory,claim,bad_slots",
    [
        # the static analyzer's (correct-semantics) reading vs the off-by-one engines
        ("make_engine_identity", "1,3,4", [0, 1, 2]),
        ("make_engine_capture_output", "1,3,4", [0, 1, 2]),
        ("make_hf", "0,2,5", [2]),
        ("make_split", "1,2,4", [0]),
        ("make_engine", "0,2", [2]),  # slot count differs
    ],
)
def test_mismatching_expect_is_refuted_with_exit_1(factory, claim, bad_slots):
    r = run("--factory", f"probe_tiny_targets:{factory}", "--expect", claim)
    assert r.exit_code == 1, r.output
    assert "REFUTED" in r.stdout
    code, data = capture_json(factory, "--expect", claim)
    assert code == 1 and data["verdict"] == "refuted" and data["exit_code"] == 1
    assert [s["slot"] for s in data["slots"] if s["verdict"] == "refuted"] == bad_slots


def test_text_report_shows_layout_with_embedding_and_eager_note():
    r = run("--factory", "probe_tiny_targets:make_engine", "--expect", "0,2,4")
    assert r.exit_code == 0, r.output
    assert "observed aux layout: [b=0 embedding, b=2, b=4]" in r.stdout
    assert "eager (no CUDA graphs, no torch.compile)" in r.stdout
    assert "verdict: CONFIRMED" in r.stdout


def test_expect_trace_json(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"model": "EngineCausalLM", "boundaries": [0, 2, 4], "other": 1}))
    code, data = capture_json("make_engine", "--expect-trace", str(trace))
    assert code == 0 and data["verdict"] == "confirmed"
    assert data["claim"] == {
        "source": str(trace), "model": "EngineCausalLM", "boundaries": [0, 2, 4],
        "outcome": "captures", "raises_at": None, "layer_ids": None,
    }
    assert data["model"] == "EngineCausalLM" and data["outcome"] == "captures"
    trace.write_text(json.dumps({"model": "EngineCausalLM", "boundaries": [1, 3, 5]}))
    code, data = capture_json("make_engine", "--expect-trace", str(trace))
    assert code == 1 and data["verdict"] == "refuted"


def test_hf_final_entry_is_after_the_final_norm():
    # transformers' hidden_states[-1] is normed: b=L after the norm is not the b=L stream
    code, data = capture_json("make_hf", "--factory-arg", "aux_ids=[-1,1,4]", "--expect", "0,2,5")
    last = data["observations"][data["primary_observation"]]["chunks"][2]
    assert last["boundary"] == 5 and last["view"] == "after the final norm"
    assert not last["confirmed"] and code == 1


def test_without_claim_reports_layout_and_exits_0(tmp_path):
    out = tmp_path / "r.json"
    r = run("--factory", "probe_tiny_targets:make_split", "--format", "json", "-o", str(out))
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["boundaries"] == [0, 2, 4] and data["verdict"] == "observed"
    assert set(data["timings"]) >= {"build_target", "forward", "match", "total"}
    assert data["device"] == "cpu" and data["dtype"] == "float32"


def test_layer_cross_check_and_in_place_residual_is_clean():
    # SplitLayer updates the residual in place: without clones in the hooks the recorded
    # outputs would be overwritten and the cross-check would warn
    code, data = capture_json("make_split")
    assert not [w for w in data["warnings"] if "!=" in w]


def test_nothing_observed_is_inconclusive():
    r = run("--factory", "probe_tiny_targets:make_hf", "--factory-arg", "aux_ids=null",
            "--expect", "0,2,4")
    assert r.exit_code == 1
    assert "no aux hidden states were observed" in r.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--factory", "nope_module:fn"], "cannot import module 'nope_module'"),
        (["--factory", "no_colon"], "must look like module:function"),
        (["--factory", "probe_tiny_targets:missing"], "has no callable 'missing'"),
        (["--factory", "probe_tiny_targets:make_hf", "--factory-arg", "bogus=1"], "takes no argument 'bogus'"),
        (["--factory", "probe_tiny_targets:make_hf", "--expect", "0,x"], "'x' is not an integer"),
        (["--factory", "probe_tiny_targets:make_hf", "--expect", "0,2,40"], "boundary 40 is out of range"),
        (["--factory", "probe_tiny_targets:make_hf", "--layers-module", "model.nope"], "no such submodule"),
        (["--factory", "probe_tiny_targets:make_hf", "--expect-trace", "/nonexistent.json"], "does not exist"),
        ([], "exactly one of --factory"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, needle):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert "Traceback" not in r.output
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) == 1


def test_expect_trace_without_boundaries_key(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"model": "x"}))
    r = run("--factory", "probe_tiny_targets:make_hf", "--expect-trace", str(bad))
    assert r.exit_code == 2 and 'no top-level key "boundaries"' in r.output


def test_hf_config_without_transformers_is_a_clear_error(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # "not installed": import raises
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    r = run("--hf-config", str(tmp_path))
    assert r.exit_code == 2
    assert "needs the `transformers` package" in r.output


def test_python_api_matches_cli():
    from flowtrace.probe import probe_capture

    res = probe_capture(factory="probe_tiny_targets:make_engine", path=[str(HERE)], expect=[0, 2, 4])
    assert res.boundaries == (0, 2, 4) and res.verdict == "confirmed" and res.exit_code == 0
    assert json.loads(res.to_json())["boundaries"] == [0, 2, 4]


def test_hf_config_with_transformers_records_hf_hidden_states(tmp_path):
    """With transformers installed: a random-init HF Llama; b=k equals its hidden_states[k]."""
    pytest.importorskip("transformers")
    from flowtrace.probe.boundaries import BoundaryRecorder
    from flowtrace.probe.targets import TargetSpec, load_target

    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
        "vocab_size": 64, "max_position_embeddings": 64,
    }))
    t = load_target(TargetSpec(hf_config=str(tmp_path)), torch.device("cpu"), torch.float32)
    with torch.no_grad(), BoundaryRecorder(t.embed, t.layers, t.hidden_size, t.final_norm) as rec:
        out = t.model(input_ids=t.inputs["input_ids"], output_hidden_states=True)
    tape = rec.tape()
    hs = out.hidden_states
    assert all(torch.equal(hs[k], tape.streams[k]) for k in range(3))
    normed = [v for v in tape.views if v.label == "after the final norm"]
    assert normed and torch.equal(hs[3], normed[0].tensor)
    r = run("--hf-config", str(tmp_path), "--expect", "0,1")
    assert r.exit_code == 1 and "no aux hidden states were observed" in r.stdout
