"""One command line: the same option spellings, the same error shape, the same configuration.

Each test names the inconsistency a user met: ``--output-format`` refused by ``scan`` while
``check`` refused ``--format``; click's ``Usage: ... Error:`` block next to flowtrace's one
line; ``scan`` listing findings that ``[tool.flowtrace]`` turned off for ``check``; a
progress bar whose percentage went backwards as the fixpoint found more files.
"""

from __future__ import annotations

import json
from pathlib import Path
import re
import shutil

import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE
from flowtrace.cli.main import main

FAST = ("--no-cache", "--jobs", "1")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture()
def engine(tmp_path):
    tree = tmp_path / "engine"
    shutil.copytree(SGLANG_LIKE, tree, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    return tree


@pytest.mark.parametrize("spelling", ["--format", "--output-format"])
def test_scan_and_check_take_both_spellings(spelling):
    scan = run("scan", SGLANG_LIKE, *FAST, spelling, "json")
    assert scan.exit_code == 0, scan.output
    assert json.loads(scan.stdout)["schema"] == "flowtrace.scan/1"
    check = run("check", SGLANG_LIKE, *FAST, spelling, "json", "--exit-zero")
    assert check.exit_code == 0, check.output
    assert json.loads(check.stdout)["schema"] == "flowtrace.check/1"


@pytest.mark.parametrize("command", ["trace", "compat", "graph", "rules"])
def test_every_format_option_has_both_spellings(command):
    helptext = run(command, "--help").stdout
    assert "--format" in helptext and "--output-format" in helptext, helptext


@pytest.mark.parametrize(
    "args",
    [
        ("scan", SGLANG_LIKE, "--format", "yaml"),  # bad choice (click)
        ("scan", SGLANG_LIKE, "--no-such-option"),  # unknown option (click)
        ("scan", str(Path(__file__).resolve().parents[1] / "README.md")),  # no Python engine code (PATH defaults to .)
        ("--no-such-global",),  # the group's own parse error
        ("check", SGLANG_LIKE, "--fail-on", "sometimes"),
        ("check", "/no/such/path"),  # flowtrace's own UsageError
        ("trace", SGLANG_LIKE, "-m", "AlphaForCausalLM"),  # neither -L nor --target-config
        ("nosuchcommand",),
    ],
)
def test_every_error_is_one_line_starting_flowtrace_error(args):
    res = run(*args)
    assert res.exit_code == 2, res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("flowtrace: error: "), res.stderr
    assert "Usage:" not in res.output and "Traceback" not in res.output


def test_probe_usage_errors_have_the_same_shape():
    pytest.importorskip("torch")
    res = run("probe", "capture", "--factory", "x:y", "--factory-arg", "no-equals-sign")
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("flowtrace: error: ") and "KEY=VALUE" in res.stderr, res.stderr


def test_scan_honours_tool_flowtrace_like_check(engine):
    # epsilon.py has FT002 and FT004 (errors); the config turns FT0 off except FT004, and
    # ignores every rule under sglang/srt/models/beta.py.
    (engine / "pyproject.toml").write_text(
        '[tool.flowtrace]\nselect = ["FT004", "FT013"]\n[tool.flowtrace.per-file-ignores]\n"sglang/srt/models/beta.py"'
        ' = ["FT013"]\n',
        encoding="utf-8",
    )
    scan = run("scan", engine, *FAST, "--format", "json")
    check = run("check", engine, *FAST, "--format", "json", "--exit-zero")
    assert scan.exit_code == 0 and check.exit_code == 0, scan.output + check.output
    scan_rules = sorted((f["rule"], f["file"]) for f in json.loads(scan.stdout)["findings"])
    check_rules = sorted((f["rule"], f["file"]) for f in json.loads(check.stdout)["findings"])
    # theta.py:23 stores a reference to residual and updates it in place (FT013, kept);
    # beta.py's FT013 is ignored per file; epsilon.py:51 ZetaForCausalLM has no loop (FT004).
    assert (
        scan_rules
        == check_rules
        == [("FT004", "sglang/srt/models/epsilon.py"), ("FT013", "sglang/srt/models/theta.py")]
    )
    isolated = run("scan", engine, *FAST, "--format", "json", "--isolated")
    assert "FT002" in {f["rule"] for f in json.loads(isolated.stdout)["findings"]}


def test_scan_reports_a_bad_config_like_check(engine):
    (engine / "pyproject.toml").write_text('[tool.flowtrace]\nselect = ["FT999"]\n', encoding="utf-8")
    res = run("scan", engine, *FAST)
    assert res.exit_code == 2 and res.stderr.startswith("flowtrace: error: ") and "FT999" in res.stderr


def test_the_progress_bar_counts_up_and_never_shows_a_moving_total(engine, capsys):
    from flowtrace import api
    from flowtrace.index.build import IndexOptions

    api.scan(engine, options=IndexOptions(use_cache=False, jobs=1, progress=True))
    err = capsys.readouterr().err
    frames = [f for f in re.split(r"[\r\n]", err) if f.startswith("flowtrace: parsing")]
    assert frames, err
    # An indeterminate bar: "N file" counts, no "N/M" and no percentage that could go back.
    assert not any("%" in f or re.search(r"\d+/\d+", f) for f in frames), frames
    counts = [int(m.group(1)) for f in frames if (m := re.search(r"parsing:\s+(\d+)\s*file", f))]
    assert counts and counts == sorted(counts), frames


def test_report_from_a_saved_scan_is_the_report_scan_writes(tmp_path):
    scan_json, direct, rebuilt = tmp_path / "scan.json", tmp_path / "direct.html", tmp_path / "rebuilt.html"
    res = run("scan", SGLANG_LIKE, *FAST, "--format", "json", "-o", scan_json, "--html", direct)
    assert res.exit_code == 0, res.output
    res = run("report", "--scan", scan_json, "-o", rebuilt)
    assert res.exit_code == 0 and "warning" not in res.stderr, res.output
    html = rebuilt.read_text(encoding="utf-8")
    # What the old `report --scan` lost: snippets (epsilon.py:23, the FT002 line, reads
    # layers_to_capture), the per-model graph and the capture paths.
    assert "layers_to_capture" in html and "<svg" in html
    assert html == direct.read_text(encoding="utf-8")


def test_report_from_an_old_scan_document_warns(tmp_path):
    scan_json = tmp_path / "scan.json"
    run("scan", SGLANG_LIKE, *FAST, "--format", "json", "-o", scan_json)
    doc = json.loads(scan_json.read_text(encoding="utf-8"))
    del doc["report"]
    scan_json.write_text(json.dumps(doc), encoding="utf-8")
    res = run("report", "--scan", scan_json, "-o", tmp_path / "r.html")
    assert res.exit_code == 0 and res.stderr.startswith("flowtrace: warning: ") and "no report data" in res.stderr
