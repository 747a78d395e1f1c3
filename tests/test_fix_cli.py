"""The command-line contracts: `flowtrace fix`, `check --fix/--diff` (ruff's), `compat --fix`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowtrace.cli.main import main

from fixture_paths import FIXTURES


@pytest.fixture
def root(tmp_path: Path) -> Path:
    dest = tmp_path / "engine"
    shutil.copytree(FIXTURES / "fix_seed_like", dest, ignore=shutil.ignore_patterns("__pycache__", ".flowtrace_cache"))
    return dest


def invoke(*args: str):
    return CliRunner().invoke(main, [*args, "--no-cache", "-j", "1"])


def snapshot(root: Path) -> dict:
    return {p: p.read_bytes() for p in root.rglob("*.py")}


def test_fix_lists_then_diff_then_write(root):
    before = snapshot(root)
    listed = invoke("fix", str(root))
    assert listed.exit_code == 1
    assert "sglang/srt/models/seek.py:59: FT009 fix: record the embedding" in listed.stdout
    diff = invoke("fix", str(root), "--diff")
    assert diff.exit_code == 1
    assert (
        "+++ b/sglang/srt/models/noneres.py" in diff.stdout
        and "+        if -1 in self.layers_to_capture:" in diff.stdout
    )
    assert snapshot(root) == before, "neither listing nor --diff writes"
    written = invoke("fix", str(root), "--write")
    assert written.exit_code == 0, written.output
    assert snapshot(root) != before
    again = invoke("fix", str(root), "--diff")
    assert again.exit_code == 0 and again.stdout == ""


def test_fix_select_limits_the_rules(root):
    diff = invoke("fix", str(root), "--diff", "--select", "FT022")
    assert diff.exit_code == 1
    assert "noneres.py" in diff.stdout and "seek.py" not in diff.stdout and "vlwrap.py" not in diff.stdout


def test_fix_diff_and_write_exclude_each_other(root):
    assert invoke("fix", str(root), "--diff", "--write").exit_code == 2


def test_check_diff_prints_only_the_diff_and_writes_nothing(root):
    before = snapshot(root)
    out = invoke("check", str(root), "--diff")
    assert out.exit_code == 1
    assert out.stdout.startswith("--- a/sglang/srt/models/")
    assert "FT007" not in out.stdout  # findings are not printed with --diff
    assert snapshot(root) == before


def test_check_fix_writes_and_reports_what_is_left(root):
    out = invoke("check", str(root), "--fix", "--output-format", "concise")
    # left (no codemod): FT007 on seek.py's identity setter, with FT008 (its default) merged in as
    # the same root cause, and FT010 on the input-point loops
    codes = sorted({line.split(": ")[1].split(" ")[0] for line in out.stdout.splitlines()})
    assert codes == ["FT007", "FT010"]
    assert "same cause as FT008" in out.stdout
    assert out.exit_code == 1  # warnings remain (default --fail-on warning)
    assert invoke("check", str(root), "--diff").exit_code == 0


DRAFT = """{
  "architectures": [
    "LlamaForCausalLMEagle3"
  ],
  "eagle_config": {
    "eagle_aux_hidden_state_layer_ids": [
      2,
      15,
      29
    ]
  },
  "target_hidden_size": 64
}
"""

# Written by hand: the ids SeekV2 (b = i + 1, ids unchanged) needs for b = [4, 16, 30] are
# [3, 15, 29]; the rest keeps its order and its two-space indentation; the record goes last.
FIXED = """{
  "architectures": [
    "LlamaForCausalLMEagle3"
  ],
  "eagle_config": {
    "eagle_aux_hidden_state_layer_ids": [
      3,
      15,
      29
    ]
  },
  "target_hidden_size": 64,
  "flowtrace": {
    "trained_boundaries": [
      4,
      16,
      30
    ],
    "trained_with": "given",
    "trained_ids": [
      2,
      15,
      29
    ]
  }
}
"""


def _configs(tmp_path: Path, draft_text: str) -> tuple[Path, Path]:
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"architectures": ["SeekV2ForCausalLM"], "num_hidden_layers": 32, "hidden_size": 64}))
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(draft_text)
    return target, draft


def test_compat_fix_rewrites_the_draft_config_and_a_plain_rerun_matches(root, tmp_path):
    target, draft = _configs(tmp_path, DRAFT)
    args = ("compat", str(root), "--target-config", str(target), "--draft-config", str(draft))
    assert invoke(*args, "--trained-boundaries", "4,16,30").exit_code == 1  # served [3, 16, 30]
    preview = invoke(*args, "--trained-boundaries", "4,16,30", "--fix", "--diff")
    assert preview.exit_code == 1
    assert preview.stdout.startswith("--- a/config.json\n+++ b/config.json\n")
    assert "+      3,\n" in preview.stdout and '+  "flowtrace": {\n' in preview.stdout
    assert (draft / "config.json").read_text() == DRAFT
    fixed = invoke(*args, "--trained-boundaries", "4,16,30", "--fix")
    assert fixed.exit_code == 0, fixed.output
    assert (draft / "config.json").read_text() == FIXED
    rerun = invoke(*args)
    assert rerun.exit_code == 0, rerun.output
    assert "MATCH" in rerun.stdout
    # the rewritten config already matches: --fix --diff has no diff to show, which is exit 0
    again = invoke(*args, "--fix", "--diff")
    assert (again.exit_code, again.stdout) == (0, ""), again.output
    assert "already MATCH: nothing to change" in again.stderr
    assert (draft / "config.json").read_text() == FIXED


def test_compat_fix_keeps_four_space_indentation(root, tmp_path):
    target, draft = _configs(tmp_path, DRAFT.replace("  ", "    "))
    fixed = invoke(
        "compat",
        str(root),
        "--target-config",
        str(target),
        "--draft-config",
        str(draft),
        "--trained-boundaries",
        "4,16,30",
        "--fix",
    )
    assert fixed.exit_code == 0, fixed.output
    assert (draft / "config.json").read_text() == FIXED.replace("  ", "    ")


def test_compat_fix_refuses_when_no_ids_can_serve_the_layout(root, tmp_path):
    """The founding story before fix 3: no id reaches the embedding; only a code change can."""
    text = DRAFT.replace("      2,\n      15,\n      29\n", "      -1,\n      2,\n      30\n")
    target, draft = _configs(tmp_path, text)
    out = invoke("compat", str(root), "--target-config", str(target), "--draft-config", str(draft), "--fix")
    assert out.exit_code == 1
    assert "no draft-config ids can serve the trained layout" in out.output
    assert (draft / "config.json").read_text() == text


def test_compat_fix_says_why_compat_refuses_the_rewrite(root, tmp_path, monkeypatch):
    """A rewrite that compat, reading it back, does not find MATCH is not offered, and the line
    says compat's differences in words (they are data: joining them as strings raised)."""
    import flowtrace.fix.draft_config as draft_config

    real = draft_config.rewrite

    def keeps_old_ids(text, key, ids, trained, convention, old_ids):
        # the draft's own ids (2, 15, 29), recorded as the engine's: served [3, 16, 30], trained [4, 16, 30]
        return real(text, key, old_ids, trained, convention, old_ids)

    monkeypatch.setattr(draft_config, "rewrite", keeps_old_ids)
    target, draft = _configs(tmp_path, DRAFT)
    out = invoke(
        "compat",
        str(root),
        "--target-config",
        str(target),
        "--draft-config",
        str(draft),
        "--trained-boundaries",
        "4,16,30",
        "--fix",
    )
    assert out.exception is None or isinstance(out.exception, SystemExit), out.exception
    assert out.exit_code == 1
    line = next(x for x in out.output.splitlines() if "do not give MATCH" in x)
    assert (
        "under eagle_config.eagle_aux_hidden_state_layer_ids do not give MATCH when compat reads the rewritten config: "
        in line
    )
    assert "slot 0: trained on b=4 (output of layer 3), served b=3 (output of layer 2)" in line
    assert (draft / "config.json").read_text() == DRAFT


def test_compat_diff_needs_fix(root, tmp_path):
    target, draft = _configs(tmp_path, DRAFT)
    assert (
        invoke("compat", str(root), "--target-config", str(target), "--draft-config", str(draft), "--diff").exit_code
        == 2
    )


def test_fix_of_a_path_without_engine_code_is_an_error(tmp_path):
    out = invoke("fix", str(tmp_path))
    assert out.exit_code == 2
    assert "no engine code" in out.output
