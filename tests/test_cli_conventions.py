"""The command line behaves like ruff's and Semgrep's: what a user of those tools expects.

Each test is one defect a new user met (issue 27), run through click's runner or a
subprocess of the installed script.
"""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from flowtrace import DISTRIBUTION, __version__
from flowtrace.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_version_names_the_distribution_not_the_unrelated_flowtrace_on_the_index():
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0
    assert res.output.strip() == f"flowtrace (flowtrace-llm {__version__})"
    name = re.search(r'^name = "([^"]+)"', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert name is not None and name.group(1) == DISTRIBUTION == "flowtrace-llm"


def test_every_documented_install_names_the_distribution():
    """A bare `pip install flowtrace...` installs someone else's project."""
    bare = re.compile(r"pip install ['\"]?flowtrace(?![-\w])")
    for rel in ("README.md", "docs/ci.md", "action.yml", ".pre-commit-hooks.yaml", "flowtrace/probe/errors.py", "flowtrace/probe/draft.py", "flowtrace/probe/cli.py"):
        text = (REPO / rel).read_text(encoding="utf-8")
        assert not bare.search(text), f"{rel}: {bare.search(text).group(0)!r}"
    docs = (REPO / "docs" / "ci.md").read_text(encoding="utf-8") + (REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    assert "rev: v0.1.0" not in docs  # no such tag exists


def test_the_license_file_is_the_one_pyproject_declares():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'license = "Apache-2.0"' in pyproject and 'license-files = ["LICENSE"]' in pyproject
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "9. Accepting Warranty or Additional Liability." in text  # the full text
