"""Outputs are safe to write and to read: atomic, never through a planted link, and with file
paths that are relative and escaped for their format, whatever characters they contain."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE
from flowtrace.cli.main import main
from flowtrace.sources import output
from flowtrace.sources.output import write_atomic

# File names a hostile tree may use: quotes, markup, URL and SARIF/GitHub metacharacters,
# whitespace, a newline, non-ASCII.
WEIRD = [
    'we"ird <i>name & co.py',
    "new\nline.py",
    "tab\there.py",
    "per%20cent,co:lon.py",
    "hash#q?x=1.py",
    "ünïcødé ß.py",
    "back\\slash.py",
]
# A served entry (registered) whose setter feeds no capture loop: FT004 in each file.
SETTER_ONLY = (
    "class {cls}:\n"
    "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
    "        self.layers_to_capture = layer_ids\n\n\n"
    "EntryClass = {cls}\n"
)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def weird_tree(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    models = root / "sglang" / "srt" / "models"
    for i, name in enumerate(WEIRD):
        (models / name).write_text(SETTER_ONLY.format(cls=f"Weird{i}"))  # FT004: a finding in each file
    return root


def expected_paths() -> set[str]:
    return {f"sglang/srt/models/{name}" for name in WEIRD}


def test_scan_json_paths_are_relative_and_round_trip(weird_tree):
    res = run("scan", weird_tree, "--format", "json", "--no-cache", "--jobs", "1")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    files = (
        {m["file"] for m in doc["models"]}
        | {f["file"] for f in doc["findings"]}
        | {d["file"] for d in doc["diagnostics"]}
    )
    assert expected_paths() <= files
    for f in files:
        assert not f.startswith("/") and ".." not in Path(f).parts and (weird_tree / f).exists(), f


def test_sarif_uris_are_relative_and_percent_encoded(weird_tree):
    res = run("check", weird_tree, "--output-format", "sarif", "--no-cache", "--jobs", "1")
    assert res.exit_code == 1, res.output
    sarif = json.loads(res.stdout)
    run0 = sarif["runs"][0]
    base = run0["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert base.startswith("file:///") and base.endswith("/")
    uris = [
        loc["physicalLocation"]["artifactLocation"]["uri"] for result in run0["results"] for loc in result["locations"]
    ]
    for uri in uris:
        assert not uri.startswith(("/", "file:")) and ".." not in uri.split("/")
        assert all(c not in uri for c in ' \n\t"<>#?\\'), uri  # percent-encoded
    decoded = {unquote(u) for u in uris}
    rel = {os.path.relpath(weird_tree / p, unquote(base[len("file://"):])) for p in expected_paths()}
    assert rel <= decoded


def test_github_annotations_stay_one_line_each(weird_tree):
    res = run("check", weird_tree, "--output-format", "github", "--no-cache", "--jobs", "1")
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    assert lines and all(line.startswith("::") for line in lines), lines
    weird = [line for line in lines if "Weird" in line]
    assert len(weird) == len(WEIRD)
    assert any("new%0Aline.py" in line for line in weird) and any(
        "per%2520cent%2Cco%3Alon.py" in line for line in weird
    )


def test_html_escapes_file_names(weird_tree, tmp_path):
    out = tmp_path / "report.html"
    res = run("scan", weird_tree, "--format", "html", "--no-cache", "--jobs", "1", "-o", out)
    assert res.exit_code == 0, res.output
    html = out.read_text(encoding="utf-8")
    assert "Weird0" in html and "<i>name" not in html


# -- write_atomic --------------------------------------------------------------------------------


def test_a_symlink_at_the_output_path_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("precious\n")
    out = tmp_path / "reports"
    out.mkdir()
    link = out / "report.json"
    link.symlink_to(victim)
    write_atomic(link, "{}\n")
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text() == "{}\n"


@pytest.mark.parametrize(
    "command",
    [
        ["scan", "{tree}", "--format", "json", "-o", "{out}"],
        ["scan", "{tree}", "--html", "{out}"],
        ["check", "{tree}", "--output-format", "sarif", "-o", "{out}"],
        ["check", "{tree}", "--write-baseline", "{out}"],
        ["graph", "{tree}", "-o", "{out}"],
        ["trace", "{tree}", "-m", "AlphaForCausalLM", "-L", "32", "-o", "{out}"],
    ],
    ids=["scan", "scan-html", "check-sarif", "baseline", "graph", "trace"],
)
def test_no_command_writes_through_a_planted_link(tmp_path, command):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out" / "result.txt"
    out.parent.mkdir()
    out.symlink_to(victim)
    args = [a.format(tree=SGLANG_LIKE, out=out) for a in command] + ["--no-cache", "--jobs", "1"]
    res = run(*args)
    assert res.exit_code in (0, 1), res.output
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink() and out.stat().st_size > 0


def test_report_command_does_not_write_through_a_link(tmp_path):
    scan = tmp_path / "scan.json"
    scan.write_text(run("scan", SGLANG_LIKE, "--format", "json", "--no-cache", "--jobs", "1").stdout)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "report.html"
    out.symlink_to(victim)
    assert run("report", "--scan", scan, "-o", out).exit_code == 0
    assert victim.read_text() == "precious\n" and not out.is_symlink()


def test_a_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "{" + "x" * 100_000 + "\ud800}")  # fails half-way through the write
    assert list(tmp_path.iterdir()) == []
    target.write_text("old\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output.os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"], "the temp file is removed"


def test_an_unwritable_output_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = run("scan", SGLANG_LIKE, "--no-cache", "--jobs", "1", "-o", blocker / "x.json")
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert len(res.stderr.strip().splitlines()) == 1
