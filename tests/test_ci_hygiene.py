"""The CI contract in tests: what .ci/run and the README promise, checked where it can fail."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CI = os.environ.get("CI", "").lower() == "true"


def test_hypothesis_is_derandomised_under_ci():
    hypothesis = pytest.importorskip("hypothesis")
    assert hypothesis.settings.get_profile("ci").derandomize is True
    if CI:
        assert hypothesis.settings.default.derandomize is True


def test_the_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    block = re.search(r"## Test it\n\n```bash\n(.*?)\n```", readme, re.S)
    assert block, "README has no '## Test it' bash block"
    for line in block.group(1).splitlines():
        assert line in ci.splitlines(), f"README test command {line!r} is not a line of .ci/run"


def test_one_torch_pin():
    """torch is pinned once, in the probe extra; the constraints file and .ci/run do not repeat it."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = [d for d in project["optional-dependencies"]["probe"] if d.startswith("torch")]
    assert pins == ["torch==2.13.0"]
    for other in (REPO / ".ci" / "run", REPO / ".ci" / "constraints.txt"):
        assert not re.search(r"^\s*[^#]*\btorch[=<>]", other.read_text(encoding="utf-8"), re.M), other


def test_constraints_pin_exact_versions():
    lines = [line.strip() for line in (REPO / ".ci" / "constraints.txt").read_text(encoding="utf-8").splitlines()]
    pins = [line for line in lines if line and not line.startswith("#")]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[A-Za-z0-9_.+!]+", p) for p in pins), pins
    names = {p.split("==")[0].lower().replace("_", "-") for p in pins}
    assert {"pytest", "hypothesis", "ruff", "mypy", "pre-commit", "selenium", "pydot"} <= names
