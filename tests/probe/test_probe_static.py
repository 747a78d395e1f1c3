"""Static trace and runtime probe side by side: agreement confirms, disagreement is refuted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.probe
torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from flowtrace.cli.main import main  # noqa: E402

ENGINE = Path(__file__).parent / "static_engines"


def test_a_misleading_engine_is_refuted_not_hidden(tmp_path):
    runner = CliRunner()
    trace_file = tmp_path / "trace.json"
    traced = runner.invoke(
        main,
        [
            "trace",
            str(ENGINE),
            "-m",
            "MirageForCausalLM",
            "--layer-ids",
            "0,2,4",
            "-L",
            "6",
            "--format",
            "json",
            "-o",
            str(trace_file),
            "--no-cache",
        ],
    )
    assert traced.exit_code == 0, traced.output
    static = json.loads(trace_file.read_text())
    # The source reads as "capture the layer's input": ids + 1 -> boundaries 1, 3, 5.
    assert static["boundaries"] == [1, 3, 5]

    probed = runner.invoke(
        main,
        [
            "probe",
            "capture",
            "--path",
            str(ENGINE),
            "--factory",
            "sglang.srt.models.mirage:make_mirage",
            "--expect-trace",
            str(trace_file),
            "--format",
            "json",
            "--device",
            "cpu",
        ],
    )
    assert probed.exit_code == 1, probed.output
    result = json.loads(probed.stdout)
    # At runtime the deferred callback fires on each layer's output: boundaries 2, 4, 6.
    assert result["boundaries"] == [2, 4, 6]
    assert result["verdict"] == "refuted"
    assert [s["verdict"] for s in result["slots"]] == ["refuted"] * 3
