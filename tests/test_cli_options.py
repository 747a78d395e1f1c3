"""One option set: every command that writes output takes ``-o``/``--output-file`` and
``--format``/``--output-format``, each as one option with both spellings, and refuses one file
named for two outputs (exit 2) instead of silently keeping only one of them.

The README promised this while ``fix`` had no ``-o`` and no ``--output-format`` and ``trace``,
``compat``, ``graph`` and ``report`` had no ``--output-file``; the walk below reads the command
tree itself, so a command added later without them fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE
from flowtrace.cli.main import main

FAST = ("--no-cache", "--jobs", "1")


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, click.Command]]:
    """Every visible leaf command under ``group``, named by its path (``probe capture``)."""
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        if isinstance(cmd, click.Group):
            out += _commands(cmd, (*prefix, name))
        else:
            out.append((" ".join((*prefix, name)), cmd))
    return out


COMMANDS = _commands(main)


def test_the_walk_sees_every_command():
    names = {name for name, _ in COMMANDS}
    expected = {"scan", "check", "trace", "compat", "diff", "graph", "report", "fix", "rules", "explain"}
    # probe's module imports without torch, so it is always registered: a probe that failed to
    # register (cli/main.py swallows that) would drop its commands from the walk unnoticed
    assert expected | {"probe capture", "probe draft", "probe engine", "probe merge"} <= names, names


@pytest.mark.parametrize(("name", "cmd"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_command_writing_output_takes_the_one_option_set(name, cmd):
    options = [p for p in cmd.params if isinstance(p, click.Option)]
    by_spelling = {spelling: p for p in options for spelling in (*p.opts, *p.secondary_opts)}
    output = by_spelling.get("-o")
    assert output is not None and {"-o", "--output", "--output-file"} <= set(
        output.opts
    ), f"{name}: -o/--output/--output-file"
    fmt = by_spelling.get("--format")
    assert fmt is not None and {"--format", "--output-format"} <= set(fmt.opts), f"{name}: --format/--output-format"
    assert (
        isinstance(fmt.type, click.Choice) and fmt.default in fmt.type.choices
    ), f"{name}: a default among the choices"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_error_line(res) -> str:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("flowtrace: error: "), res.output
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("scan", SGLANG_LIKE, *FAST, "--format", "json", "-o", "{f}", "--html", "{f}"),
        ("check", SGLANG_LIKE, *FAST, "-o", "{f}", "--also-write", "sarif={f}"),
        ("check", SGLANG_LIKE, *FAST, "--also-write", "sarif={f}", "--also-write", "json={f}"),
        ("check", SGLANG_LIKE, *FAST, "-o", "{f}", "--write-baseline", "{f}"),
    ],
)
def test_one_file_named_for_two_outputs_is_refused(tmp_path, args):
    target = tmp_path / "out.txt"
    res = run(*(str(a).replace("{f}", str(target)) for a in args))
    line = _one_error_line(res)
    assert str(target) in line and "two outputs" in line
    assert not target.exists(), "nothing is written when the command refuses"


def test_a_report_never_replaces_the_document_it_reads(tmp_path):
    scan = tmp_path / "scan.json"
    assert run("scan", SGLANG_LIKE, *FAST, "--format", "json", "-o", scan).exit_code == 0
    before = scan.read_bytes()
    line = _one_error_line(run("report", "--scan", scan, "-o", scan))
    assert "--scan and -o" in line
    assert scan.read_bytes() == before


def test_check_refuses_a_report_over_its_baseline(tmp_path):
    baseline = tmp_path / "baseline.json"
    assert run("check", SGLANG_LIKE, *FAST, "--write-baseline", baseline, "-q").exit_code == 0
    before = baseline.read_bytes()
    _one_error_line(run("check", SGLANG_LIKE, *FAST, "--baseline", baseline, "-o", baseline))
    assert baseline.read_bytes() == before


@pytest.mark.parametrize(
    ("args", "check"),
    [
        (("rules", "--output-format", "json"), lambda text: json.loads(text)[0]["code"] == "FT001"),
        (
            ("explain", "FT007", "--format", "json"),
            lambda text: json.loads(text)["name"] == "inconsistent-id-transform",
        ),
        (("explain", "FT007"), lambda text: "inconsistent-id-transform" in text),
        (
            ("trace", SGLANG_LIKE, *FAST, "-m", "AlphaForCausalLM", "-L", "32", "--output-format", "json"),
            lambda text: json.loads(text)["schema"].startswith("flowtrace.trace/"),
        ),
        (
            ("graph", SGLANG_LIKE, *FAST, "--output-format", "dot"),
            lambda text: text.startswith(("digraph", "strict digraph")),
        ),
        (
            ("fix", SGLANG_LIKE, *FAST, "--output-format", "json"),
            lambda text: json.loads(text)["schema"].startswith("flowtrace.fix/"),
        ),
        (("fix", SGLANG_LIKE, *FAST, "--diff"), lambda text: text.startswith("---")),
        (
            ("diff", SGLANG_LIKE, SGLANG_LIKE, *FAST, "--format", "json"),
            lambda text: json.loads(text)["schema"].startswith("flowtrace.diff/"),
        ),
    ],
    ids=["rules", "explain-json", "explain-text", "trace", "graph", "fix-json", "fix-diff", "diff"],
)
def test_output_file_holds_what_stdout_would(tmp_path, args, check):
    target = tmp_path / "out"
    to_stdout = run(*args)
    to_file = run(*args, "--output-file", target)
    assert to_stdout.exit_code == to_file.exit_code and to_stdout.exit_code in (0, 1), to_stdout.output + to_file.output
    assert target.read_text(encoding="utf-8") == to_stdout.stdout and check(to_stdout.stdout)
    assert to_file.stdout == ""  # the output went to the file, nothing else to stdout


def test_probe_merge_writes_its_file_with_the_same_spelling(tmp_path):
    pytest.importorskip("torch")
    doc = {
        "schema": "flowtrace.probe/1",
        "command": "capture",
        "verdict": "confirmed",
        "claim": {"model": "m.A", "boundaries": [0]},
        "boundaries": [0],
    }
    src = tmp_path / "one.json"
    src.write_text(json.dumps(doc), encoding="utf-8")
    res = run("probe", "merge", src, "--output-format", "json", "--output-file", tmp_path / "merged.json")
    assert res.exit_code in (0, 1), res.output
    assert json.loads(Path(tmp_path / "merged.json").read_text(encoding="utf-8"))["models"]
