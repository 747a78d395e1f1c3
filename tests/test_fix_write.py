"""Safe writing (flowtrace.fix.write) and the import layering of libcst."""

from __future__ import annotations

import ast
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from flowtrace.fix.model import FileEdit
from flowtrace.fix.write import write_edits

PACKAGE = Path(__file__).resolve().parents[1] / "flowtrace"

OLD = "def f():\n    return 1\n"
NEW = "def f():\n    return 2\n"


def _file(tmp_path: Path, text: str = OLD, name: str = "m.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_writes_atomically_keeping_the_mode(tmp_path):
    path = _file(tmp_path)
    path.chmod(0o640)
    [result] = write_edits(tmp_path, (FileEdit("m.py", OLD, NEW),))
    assert result.written and path.read_text() == NEW
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"], "no temporary file left"


def test_refuses_a_file_changed_since_it_was_read(tmp_path):
    path = _file(tmp_path, OLD + "# edited by someone\n")
    [result] = write_edits(tmp_path, (FileEdit("m.py", OLD, NEW),))
    assert not result.written and "changed since it was read" in result.why
    assert path.read_text() == OLD + "# edited by someone\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_refuses_a_read_only_file(tmp_path):
    path = _file(tmp_path)
    path.chmod(0o444)
    [result] = write_edits(tmp_path, (FileEdit("m.py", OLD, NEW),))
    assert not result.written and "read-only" in result.why
    assert path.read_text() == OLD


def test_refuses_a_path_that_leaves_the_tree(tmp_path):
    inside = tmp_path / "tree"
    inside.mkdir()
    outside = _file(tmp_path)
    [result] = write_edits(inside, (FileEdit("../m.py", OLD, NEW),))
    assert not result.written and "leaves the tree" in result.why
    assert outside.read_text() == OLD


def test_refuses_a_symlink_out_of_the_tree(tmp_path):
    inside = tmp_path / "tree"
    inside.mkdir()
    outside = _file(tmp_path)
    (inside / "m.py").symlink_to(outside)
    [result] = write_edits(inside, (FileEdit("m.py", OLD, NEW),))
    assert not result.written and "leaves the tree" in result.why
    assert outside.read_text() == OLD


def test_never_writes_a_file_that_no_longer_parses(tmp_path):
    path = _file(tmp_path)
    [result] = write_edits(tmp_path, (FileEdit("m.py", OLD, "def f(:\n"),))
    assert not result.written and "does not parse" in result.why
    assert path.read_text() == OLD


def test_one_refused_edit_writes_none_of_the_set(tmp_path):
    good = _file(tmp_path, OLD, "a.py")
    _file(tmp_path, OLD + "# changed\n", "b.py")
    results = write_edits(tmp_path, (FileEdit("a.py", OLD, NEW), FileEdit("b.py", OLD, NEW)))
    assert not any(r.written for r in results)
    assert good.read_text() == OLD


def _imports_libcst(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        )
        if any(n == "libcst" or n.startswith("libcst.") for n in names):
            return True
    return False


def test_only_the_fix_package_imports_libcst():
    importers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if _imports_libcst(p))
    assert importers and all(p.startswith("fix/") for p in importers), importers


def test_scan_and_check_do_not_import_libcst():
    """A scan (and the rules, which name their codemods by string) leaves libcst unimported."""
    code = (
        "import sys\n"
        "from flowtrace import api\n"
        "from flowtrace.index.build import IndexOptions\n"
        "from flowtrace.cli import main\n"
        "r = api.scan(sys.argv[1], options=IndexOptions(use_cache=False, jobs=1))\n"
        "api.findings(r)\n"
        "print('libcst' in sys.modules)\n"
    )
    root = Path(__file__).parent / "fixtures/engines/fix_seed_like"
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_refuses_what_the_os_says_is_not_writable(tmp_path, monkeypatch):
    """The same refusal when the tests run as root (which may write a 0o444 file): the check
    asks the OS, so the OS's answer is what is simulated."""
    path = _file(tmp_path)
    monkeypatch.setattr("flowtrace.fix.write.os.access", lambda p, mode: mode != os.W_OK)
    [result] = write_edits(tmp_path, (FileEdit("m.py", OLD, NEW),))
    assert not result.written and "read-only" in result.why
    assert path.read_text() == OLD
