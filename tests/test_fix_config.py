"""`flowtrace fix` fixes what `check` reports: [tool.flowtrace] selection, per-file-ignores and
`# flowtrace: ignore[...]` comments keep a finding out of the fix run; `--format json` says per
finding what was verified, refused (and why) or has no codemod, and after `--write` what was written.

On fix_seed_like (read from the fixture): FT022 at noneres.py:29 (`hidden_states + residual` with
residual None before layer 0), FT009 at seek.py:59 (no pre-loop embedding capture), FT001 at
vlwrap.py:9 (a wrapper without the EAGLE-3 methods): each has a codemod.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowtrace.cli.main import main

from fixture_paths import FIXTURES

MODELS = "sglang/srt/models"
NONERES, SEEK, VLWRAP = (f"{MODELS}/{n}.py" for n in ("noneres", "seek", "vlwrap"))
ALL_THREE = {NONERES, SEEK, VLWRAP}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    dest = tmp_path / "engine"
    shutil.copytree(FIXTURES / "fix_seed_like", dest, ignore=shutil.ignore_patterns("__pycache__", ".flowtrace_cache"))
    return dest


def invoke(*args: str):
    return CliRunner().invoke(main, [*args, "--no-cache", "-j", "1"])


def patched_files(root: Path, *extra: str) -> set[str]:
    """The files `fix --diff` would patch."""
    out = invoke("fix", str(root), "--diff", *extra)
    assert out.exit_code in (0, 1), out.output
    return {line[len("+++ b/"):] for line in out.stdout.splitlines() if line.startswith("+++ b/")}


def edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def config(root: Path, body: str) -> None:
    (root / "pyproject.toml").write_text("[tool.flowtrace]\n" + body)


def test_every_fixable_finding_is_patched_without_configuration(root):
    assert patched_files(root) == ALL_THREE


def test_an_inline_suppression_keeps_the_finding_unpatched(root):
    edit(root, NONERES, "aux_hidden_states.append(hidden_states + residual)  # the stream entering layer i",
         "aux_hidden_states.append(hidden_states + residual)  # flowtrace: ignore[FT022]")
    assert patched_files(root) == {SEEK, VLWRAP}
    doc = json.loads(invoke("fix", str(root), "--format", "json").stdout)
    assert not [f for f in doc["findings"] if f["rule"] == "FT022"], "a suppressed finding is not even looked at"


def test_the_configured_ignore_and_isolated(root):
    config(root, 'ignore = ["FT001"]\n')
    assert patched_files(root) == {NONERES, SEEK}
    assert patched_files(root, "--isolated") == ALL_THREE


def test_the_configured_select_and_the_command_line_replacing_it(root):
    config(root, 'select = ["FT022"]\n')
    assert patched_files(root) == {NONERES}
    assert patched_files(root, "--select", "FT009") == {SEEK}
    assert patched_files(root, "--extend-select", "FT001") == {NONERES, VLWRAP}


def test_per_file_ignores(root):
    config(root, f'[tool.flowtrace.per-file-ignores]\n"{SEEK}" = ["FT009"]\n')
    assert patched_files(root) == {NONERES, VLWRAP}


def test_a_config_file_named_on_the_command_line(root, tmp_path):
    other = tmp_path / "ci.toml"
    other.write_text('[tool.flowtrace]\nignore = ["FT009", "FT022"]\n')
    assert patched_files(root, "--config", str(other)) == {VLWRAP}


def test_json_lists_each_finding_with_its_verdict(root):
    out = invoke("fix", str(root), "--format", "json")
    assert out.exit_code == 1  # fixes available, as in text form
    doc = json.loads(out.stdout)
    assert doc["schema"] == "flowtrace.fix/1" and doc["mode"] == "list"
    verified = {(f["rule"], f["file"], f["line"]) for f in doc["findings"] if f["status"] == "verified"}
    assert verified == {("FT022", NONERES, 29), ("FT009", SEEK, 59), ("FT001", VLWRAP, 9)}
    for f in doc["findings"]:
        assert len(f["fingerprint"]) == 20
        if f["status"] == "verified":
            assert f["evidence"] and f["files"] == [f["file"]] and "written" not in f
            assert f["diff"].startswith(f"--- a/{f['file']}\n+++ b/{f['file']}\n")
        else:  # seek.py's identity setter (FT007) and the input-point loops (FT010) have no codemod
            assert (
                f["status"] == "no_codemod"
                and f["rule"] in ("FT007", "FT008", "FT010")
                and f["why"] == f"no codemod for {f['rule']}"
            )
    assert {(f["rule"], f["file"]) for f in doc["findings"] if f["status"] == "no_codemod"} >= {("FT007", SEEK)}
    assert doc["summary"]["verified"] == 3 and doc["summary"]["refused"] == 0 and doc["summary"]["written"] is None


def test_json_says_why_a_fix_was_refused(root):
    # fix 1 guards a sum; a difference is not the stream, so the codemod refuses it
    edit(root, NONERES, "append(hidden_states + residual)", "append(hidden_states - residual)")
    doc = json.loads(invoke("fix", str(root), "--format", "json", "--select", "FT022").stdout)
    (entry,) = doc["findings"]
    assert (entry["rule"], entry["file"], entry["status"]) == ("FT022", NONERES, "refused")
    assert "not a plain sum" in entry["why"]


def test_json_after_write_says_what_was_written(root):
    out = invoke("fix", str(root), "--write", "--format", "json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["mode"] == "write" and doc["summary"]["written"] == 3
    assert all(f["written"] for f in doc["findings"] if f["status"] == "verified")
    assert patched_files(root) == set()  # nothing left to fix


def test_json_and_diff_exclude_each_other(root):
    out = invoke("fix", str(root), "--diff", "--format", "json")
    assert out.exit_code == 2 and "--diff" in out.output


def _silence_seek_line(root: Path) -> None:
    # seek.py:59 is the setter's def line: FT009 is reported there merged into FT007 (same root cause)
    path = root / SEEK
    lines = path.read_text().splitlines(keepends=True)
    assert lines[58].startswith("    def set_eagle3_layers_to_capture")
    lines[58] = lines[58].rstrip("\n") + "  # flowtrace: ignore[FT009]\n"
    path.write_text("".join(lines))


def test_a_suppressed_cause_merged_into_another_finding_is_not_patched(root):
    _silence_seek_line(root)
    assert patched_files(root) == {NONERES, VLWRAP}
    assert invoke("check", str(root), "--diff").stdout.count("+++ b/") == 2  # check --diff: the same selection


def test_a_per_file_ignore_of_a_merged_cause(root):
    config(root, f'[tool.flowtrace.per-file-ignores]\n"{MODELS}/*.py" = ["FT022", "FT009"]\n')
    assert patched_files(root) == {VLWRAP}
