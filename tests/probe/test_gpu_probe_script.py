"""scripts/gpu_probe.sh, on its CPU dry-run path: the one prepared command a lent GPU runs must
be known to work before a GPU is there (FLOWTRACE_GPU_PROBE_DRY_RUN=1: tiny preset, CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.probe
pytest.importorskip("torch")
pytest.importorskip("safetensors")

SCRIPT = Path(__file__).parents[2] / "scripts" / "gpu_probe.sh"


def test_dry_run_runs_both_subcommands_and_reports_time_and_memory(tmp_path):
    env = {**os.environ, "FLOWTRACE_GPU_PROBE_DRY_RUN": "1", "PYTHON": sys.executable,
           "OMP_NUM_THREADS": "1"}
    r = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "preset tiny (8 layers), 32 tokens, cpu float32" in out
    # engine ids [-1, 3, 4] are boundaries 0, 4, 5; the synthetic target captures them
    assert "boundaries: [0, 4, 5]   verdict: confirmed" in out
    assert out.count("peak memory:") == 3 and out.count("  timings: ") == 2
    assert "== probe draft" in out and out.rstrip().endswith("gpu_probe: OK")
    assert (tmp_path / "capture.json").is_file() and (tmp_path / "draft.json").is_file()
