"""The probe must stay optional: importing its CLI never imports torch, and without torch a
command fails with one line that says how to install the extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.probe

ROOT = Path(__file__).resolve().parents[2]


def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
             "PYTHONDONTWRITEBYTECODE": "1"},
    )


def test_importing_the_cli_does_not_import_torch():
    r = _py(
        "import sys\n"
        "import flowtrace.probe, flowtrace.probe.cli, flowtrace.probe.results, flowtrace.probe.report\n"
        "from flowtrace.probe.cli import probe\n"
        "assert sorted(probe.commands) == ['capture', 'draft', 'engine', 'merge'], probe.commands\n"
        "import flowtrace.probe.merge\n"
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]\n"
        "print('TORCH' if bad else 'CLEAN')\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "CLEAN"


def test_torch_is_imported_once_a_command_runs():
    pytest.importorskip("torch")
    r = _py(
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from flowtrace.probe.cli import probe\n"
        "res = CliRunner().invoke(probe, ['capture', '--factory', 'probe_tiny_targets:make_engine',"
        " '--path', 'tests/probe', '--expect', '0,2,4'])\n"
        "print(res.exit_code, 'torch' in sys.modules)\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "True"]


def test_without_torch_commands_say_install_the_extra():
    r = _py(
        "import sys\n"
        "sys.modules['torch'] = None  # makes `import torch` raise ImportError\n"
        "from click.testing import CliRunner\n"
        "from flowtrace.probe.cli import probe\n"
        "for cmd in (['capture', '--factory', 'x:y'], ['draft', '.', '--factory', 'x:y']):\n"
        "    res = CliRunner().invoke(probe, cmd)\n"
        "    print(res.exit_code, res.output.strip())\n"
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        # the distribution name, not the unrelated `flowtrace` on PyPI
        assert line.startswith("2 flowtrace: error:") and "flowtrace-llm[probe]" in line
