"""The composite GitHub Action (action.yml): every input is wired, and the check step's script
does what docs/ci.md says when bash runs it the way the Actions runner does.

The runner substitutes ``${{ ... }}`` expressions in ``env`` before the step runs; the test
does the same for ``inputs.*`` and ``github.action_path`` and runs the step's script with
``bash -e`` (the runner's ``shell: bash``), pointing its venv at this environment's
``flowtrace`` script.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from fixture_paths import SGLANG_LIKE  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def steps() -> list[dict]:
    return ACTION["runs"]["steps"]


def step(step_id_or_name: str) -> dict:
    return next(s for s in steps() if step_id_or_name in (s.get("id"), s.get("name")))


def test_the_action_is_composite_and_declares_the_documented_inputs():
    assert ACTION["runs"]["using"] == "composite"
    assert {"path", "select", "ignore", "baseline", "fail-on"} <= set(ACTION["inputs"])
    docs = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")
    for name in ACTION["inputs"]:
        assert f"`{name}`" in docs, f"input {name} is not documented in docs/ci.md"


def test_every_input_is_used_by_some_step():
    text = json.dumps(steps())
    for name in ACTION["inputs"]:
        assert re.search(rf"inputs\.{re.escape(name)}\b", text), f"input {name} is declared but never used"


def test_inputs_reach_scripts_only_through_env():
    """An input spliced into a script could inject shell commands; env values cannot."""
    for s in steps():
        assert "inputs." not in s.get("run", ""), s.get("name")


def test_sarif_is_uploaded_with_codeql_upload_sarif():
    upload = next(s for s in steps() if str(s.get("uses", "")).startswith("github/codeql-action/upload-sarif@"))
    assert "inputs.sarif-file" in upload["with"]["sarif_file"]
    assert "always()" in upload["if"]  # uploaded even when findings fail the check


def test_the_action_installs_its_own_checkout_never_a_name_from_the_index():
    """`flowtrace` on PyPI is another project: the commit pinned in `uses:` is what runs."""
    install = step("Install flowtrace")
    assert install["env"] == {"FLOWTRACE_ACTION_PATH": "${{ github.action_path }}"}
    pip_lines = [line for line in install["run"].splitlines() if " install " in line]
    assert pip_lines and all(line.rstrip().endswith('"$FLOWTRACE_ACTION_PATH"') for line in pip_lines), pip_lines
    assert "version" not in ACTION["inputs"]


def _run_check_step(tmp_path: Path, inputs: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    declared = {k: str(v.get("default", "")) for k, v in ACTION["inputs"].items()}
    values = {**declared, **inputs}
    check = step("check")

    def substitute(value: str) -> str:
        def one(m: re.Match) -> str:
            expr = m.group(1)
            assert expr.startswith("inputs."), expr
            return values[expr.removeprefix("inputs.")]

        return EXPR.sub(one, str(value))

    runner_temp = tmp_path / "runner"
    script_dir = runner_temp / "flowtrace-venv" / "bin"
    if not script_dir.exists():
        script_dir.mkdir(parents=True)
        (script_dir / "flowtrace").symlink_to(
            shutil.which("flowtrace") or str(Path(sys.executable).with_name("flowtrace"))
        )
    outputs = tmp_path / "github_output"
    outputs.write_text("", encoding="utf-8")
    env = {**os.environ, "RUNNER_TEMP": str(runner_temp), "GITHUB_OUTPUT": str(outputs)}
    env.update({k: substitute(v) for k, v in check["env"].items()})
    res = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", check["run"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    got = dict(line.split("=", 1) for line in outputs.read_text(encoding="utf-8").splitlines() if "=" in line)
    return res, got


@pytest.fixture()
def engine(tmp_path):
    tree = tmp_path / "engine"
    shutil.copytree(SGLANG_LIKE, tree, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    return tree


def test_the_check_step_writes_sarif_and_records_the_exit_code(tmp_path, engine):
    res, out = _run_check_step(tmp_path, {"path": str(engine), "select": "FT002,FT004", "fail-on": "warning"})
    assert res.returncode == 0, res.stderr  # the step itself succeeds so that the upload runs
    # epsilon.py: FT004 is a start-up crash (the engine's CUDA graph capture unpacks a bare
    # output): a warning; FT002 a start-up refusal: info
    assert out["exit-code"] == "1"
    sarif = json.loads((tmp_path / out["sarif-file"]).read_text(encoding="utf-8"))
    rules = {r["ruleId"] for r in sarif["runs"][0]["results"]}
    assert rules == {"FT002", "FT004"}


def test_ignore_and_baseline_inputs_reach_the_check(tmp_path, engine):
    base = tmp_path / "base.json"
    subprocess.run(
        [
            shutil.which("flowtrace") or str(Path(sys.executable).with_name("flowtrace")),
            "check",
            str(engine),
            "--no-cache",
            "--write-baseline",
            str(base),
        ],
        check=True,
        capture_output=True,
    )
    res, out = _run_check_step(tmp_path, {"path": str(engine), "baseline": str(base)})
    assert res.returncode == 0 and out["exit-code"] == "0", res.stderr  # every finding is in the baseline
    res, out = _run_check_step(tmp_path, {"path": str(engine), "ignore": "FT0", "fail-on": "info"})
    assert out["exit-code"] == "0", res.stderr
    res, out = _run_check_step(tmp_path, {"path": str(engine), "fail-on": "nonsense"})
    assert out["exit-code"] == "2" and res.stderr.startswith("flowtrace: error:"), res.stderr


def test_upload_sarif_is_pinned_to_a_commit_and_a_failed_upload_only_warns():
    upload = step("upload")
    ref = upload["uses"].split("@", 1)[1]
    assert re.fullmatch(r"[0-9a-f]{40}", ref), ref  # a sha, not a movable tag
    assert upload.get("continue-on-error") is True  # no code scanning: the job goes on
    warn = step("Warn when the upload failed")
    assert "steps.upload.outcome == 'failure'" in warn["if"] and "::warning" in warn["run"]
    names = [s.get("name") for s in steps()]
    # the check's exit code decides last
    assert names.index("Warn when the upload failed") < names.index("Fail on findings")
    assert step("Fail on findings")["if"] == "${{ steps.check.outputs.exit-code != '0' }}"


def test_one_run_writes_sarif_annotations_and_extra_outputs(tmp_path, engine):
    # FT022 (a None residual added at index 0: a start-up crash, a warning, failing at the default fail-on) fires on the
    # fixture
    res, out = _run_check_step(
        tmp_path, {"path": str(engine), "select": "FT022", "extra-outputs": "json=extra.json concise=extra.txt"}
    )
    assert res.returncode == 0 and out["exit-code"] == "1", res.stderr
    sarif = json.loads((tmp_path / out["sarif-file"]).read_text(encoding="utf-8"))
    assert {r["ruleId"] for r in sarif["runs"][0]["results"]} == {"FT022"}
    # FT022 is a start-up crash in the fixture (no runner: the profile's start-up forward holds): a warning
    assert res.stdout.startswith("::warning ") and "FT022" in res.stdout  # annotations from the same run
    assert json.loads((tmp_path / "extra.json").read_text(encoding="utf-8"))["schema"] == "flowtrace.check/1"
    assert "FT022 [warning]" in (tmp_path / "extra.txt").read_text(encoding="utf-8")
    res, out = _run_check_step(tmp_path, {"path": str(engine), "select": "FT022", "annotations": "false"})
    assert res.stdout == "" and out["exit-code"] == "1"
