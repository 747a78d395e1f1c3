"""docs/probe.md runs as written: every `flowtrace` command in it is a command with those
options, and the worked examples (my_target.py: trace, capture, merge, report) print what the
page shows. The page's expected lines are compared with the real output, so a changed report
format or a renamed option fails here rather than in a reader's terminal."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from flowtrace.cli.main import main

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "probe.md"
TEXT = DOC.read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", TEXT, re.S)
# the pages whose shell blocks a new user copies commands from
PAGES = (DOC, REPO / "docs" / "probe-engine.md", REPO / "README.md", REPO / "docs" / "ci.md", REPO / "docs" / "fix.md")


def _commands() -> list[list[str]]:
    """Every `flowtrace ...` line of the pages' shell blocks, continuation lines joined."""
    out = []
    for lang, body in (
        b for page in PAGES for b in re.findall(r"```(\w+)\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    ):
        if lang not in ("bash", "console"):
            continue
        joined = re.sub(r"\\\n\s*", " ", body)
        for line in joined.splitlines():
            line = line.removeprefix("$ ").split("  #", 1)[0].strip()
            for part in line.split("&&"):  # `pip install . && flowtrace scan ...`
                part = part.strip()
                if part.startswith("flowtrace "):
                    out.append(shlex.split(part)[1:])
    return out


def _command(args: list[str]) -> tuple[click.Command, list[str]]:
    cmd: click.Command = main
    rest = list(args)
    while isinstance(cmd, click.Group) and rest and rest[0] in cmd.commands:
        cmd = cmd.commands[rest.pop(0)]
    return cmd, rest


@pytest.mark.parametrize("args", _commands(), ids=lambda a: " ".join(a)[:60])
def test_every_command_on_the_page_has_those_options(args):
    cmd, rest = _command(args)
    assert not isinstance(cmd, click.Group), args
    spellings = {o for p in cmd.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}
    used = [a.split("=", 1)[0] for a in rest if a.startswith("-") and not re.fullmatch(r"-\d.*", a)]
    assert set(used) <= spellings, f"{' '.join(args)}: {sorted(set(used) - spellings)} not options of {cmd.name}"


def _python_block(name: str) -> str:
    return next(body for lang, body in BLOCKS if lang == "python" and body.startswith(f"# {name}\n"))


def _console_runs() -> list[tuple[list[str], list[str]]]:
    """(command, the page's expected output lines) of the console blocks run in my_target's folder."""
    runs = []
    for lang, body in BLOCKS:
        if lang != "console" or "my_target:build" not in body and "-m Model" not in body:
            continue
        current: tuple[list[str], list[str]] | None = None
        for line in body.splitlines():
            if line.startswith("$ "):
                current = (shlex.split(line[2:])[1:], [])
                runs.append(current)
            elif current is not None and line.strip() not in ("...", ""):
                current[1].append(line)
    return runs


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    (tmp_path / "my_target.py").write_text(_python_block("my_target.py"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_the_capture_example_prints_what_the_page_shows(folder):
    runs = _console_runs()
    assert len(runs) >= 4
    for args, expected in runs:
        res = CliRunner().invoke(main, [*args, "--no-cache"] if args[0] == "trace" else args)
        assert res.exit_code in (0, 1), res.output
        printed = res.stdout.splitlines()
        missing = [line for line in expected if line not in printed]
        assert not missing, f"flowtrace {' '.join(args)}: the page shows lines it does not print: {missing}"


def test_the_merge_example_marks_the_row(folder):
    block = next(body for lang, body in BLOCKS if lang == "bash" and "probe merge" in body)
    CliRunner().invoke(
        main,
        [
            "trace",
            ".",
            "-m",
            "Model",
            "--layer-ids",
            "-1,2",
            "-L",
            "6",
            "--format",
            "json",
            "-o",
            "trace-a.json",
            "--no-cache",
        ],
    )
    for line in block.splitlines():
        args = shlex.split(line.split("  #", 1)[0])[1:]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, f"{line}: {res.output}"
    import json

    doc = json.loads((folder / "probe.json").read_text(encoding="utf-8"))
    assert doc["models"] == [
        {
            "model": "my_target.Model",
            "verdict": "confirmed",
            "runs": 2,
            "counts": {"confirmed": 2},
            "layer_ids": [[-1, 2], [2, 4]],
        }
    ]
    assert "2 confirmed" in (folder / "report.html").read_text(encoding="utf-8")
