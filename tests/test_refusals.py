"""Wrong input is answered as wrong, the same way by every command, and leaves no trace.

What a user met: ``diff OLD <folder without engine code>`` reported "72 lost" with exit 1
while check and fix said "no engine code" (exit 2); ``scan lone_script.py`` exited 0 without a
word; a refused ``check`` still left ``.flowtrace_cache/`` in the user's folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE
from flowtrace.cli.main import main

FAST = ("--jobs", "1")  # the cache is on: what a refused command must not leave behind


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.fixture()
def plain(tmp_path) -> Path:
    """A folder with one ordinary Python script: no registry, setter, capture or layer loop."""
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "hello.py").write_text("import sys\n\n\ndef main():\n    print('hello', sys.argv)\n", encoding="utf-8")
    return folder


def _refusal(res) -> str:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("flowtrace: error: "), res.output
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ("check", "{p}"),
        ("scan", "{p}"),
        ("fix", "{p}"),
        ("graph", "{p}"),
        ("trace", "{p}", "-m", "Hello", "-L", "4"),
        ("diff", str(SGLANG_LIKE), "{p}"),
        ("diff", "{p}", str(SGLANG_LIKE)),
    ],
    ids=["check", "scan", "fix", "graph", "trace", "diff-new", "diff-old"],
)
@pytest.mark.parametrize("target", ["folder", "file"])
def test_no_engine_code_is_one_line_exit_2_and_writes_nothing(plain, command, target):
    given = plain if target == "folder" else plain / "hello.py"
    before = _listing(plain.parent)
    line = _refusal(run(*(str(a).replace("{p}", str(given)) for a in command), *FAST))
    assert (
        f"{given}: no engine code (1 Python file, none with a model registry, capture setter or decoder-layer loop"
        in line
    ), line
    assert "give an engine checkout, an unpacked wheel or pypi:NAME==VERSION" in line
    assert _listing(plain.parent) == before, "a refused command leaves nothing in (or beside) what it read"


def test_diff_says_what_check_says(plain):
    checked = _refusal(run("check", plain, *FAST))
    diffed = _refusal(run("diff", SGLANG_LIKE, plain, *FAST))
    assert diffed == checked


def test_an_engine_tree_is_still_cached_where_it_lies(tmp_path):
    tree = tmp_path / "engine"
    shutil.copytree(SGLANG_LIKE, tree, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    assert run("check", tree, *FAST, "--exit-zero", "-q").exit_code == 0
    cache = tree / ".flowtrace_cache"
    assert (cache / ".gitignore").read_text() == "*\n" and any(cache.glob("snapshot-*.pickle"))


def test_an_interrupted_scan_leaves_no_cache_folder(tmp_path, monkeypatch):
    """Entries are written with the snapshot at the end of a scan, never half a cache."""
    from flowtrace import api
    from flowtrace.index import build
    from flowtrace.index.build import IndexOptions

    tree = tmp_path / "engine"
    shutil.copytree(SGLANG_LIKE, tree, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))

    def interrupted(self):  # noqa: ANN001
        raise KeyboardInterrupt

    monkeypatch.setattr(build._IndexRun, "close_fixpoint", interrupted)
    with pytest.raises(KeyboardInterrupt):
        api.scan(tree, options=IndexOptions(jobs=1))
    assert not (tree / ".flowtrace_cache").exists()
