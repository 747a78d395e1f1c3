"""The repository holds the product: code, tests, docs and the example report, nothing of the
machine or the working notes it was built with.

Read from ``git ls-files`` (what a clone gets), so a file left untracked in a checkout does not
count; outside a git checkout (an unpacked sdist) there is nothing to check.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# An absolute path on a developer's or a CI machine: a home, a temp folder, a mount, a
# workspace. Not preceded by a name character, a dot or a slash, so URLs
# (``https://host/home/…``) and relative paths (``docs/tmp/``) do not count.
MACHINE_PATH = re.compile(r"(?<![\w.~$/-])/(?:work|tmp|root|home|Users|mnt|media|srv|var/folders|private/var)/")


def _tracked(*pathspec: str) -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing is under version control here")
    out = subprocess.run(["git", "ls-files", "-z", "--", *pathspec], cwd=REPO, capture_output=True, check=True)
    return [p for p in out.stdout.decode("utf-8").split("\0") if p]


def _text(path: str) -> str | None:
    data = (REPO / path).read_bytes() if (REPO / path).is_file() else b""
    if b"\0" in data:
        return None  # binary
    return data.decode("utf-8", errors="replace")


def test_the_machine_path_pattern():
    """What the pattern must catch and what it must let pass (written, not derived)."""
    for caught in ("see /work/engines/x", "cd /tmp/h25 &&", '"/root/.cache/x"', "(/home/u/x)", "`/Users/a/b`"):
        assert MACHINE_PATH.search(caught), caught
    for passed in (
        "https://example.org/home/page",
        "docs/tmp/x",
        "~/.cache/flowtrace",
        "$HOME/work/x",
        "a/work/b",
        "/usr/bin/env",
    ):
        assert not MACHINE_PATH.search(passed), passed


def test_no_tracked_file_outside_tests_names_a_machine_path():
    offenders = []
    for path in _tracked():
        if path.startswith("tests/"):
            continue
        text = _text(path)
        for number, line in enumerate((text or "").splitlines(), 1):
            if MACHINE_PATH.search(line):
                offenders.append(f"{path}:{number}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders)


def test_reports_holds_only_the_example_report():
    assert _tracked("reports") == ["reports/example.html"]


def test_gitignore_lets_only_the_example_report_into_reports():
    lines = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    exceptions = [line for line in lines if line.startswith("!reports")]
    assert exceptions == ["!reports/example.html"]


# A Markdown link target, or a ``*.md`` name in backticks: a page the reader is sent to.
_LINK = re.compile(r"\[[^\]\n]*\]\(([\w.-]*[./][\w./-]*)(?:#[^)]*)?\)")
_NAMED_PAGE = re.compile(r"`([\w./-]+\.md)`")


def test_every_page_the_docs_send_a_reader_to_exists():
    """README, CONTRIBUTING and docs/ name other pages by relative link or as ``x.md`` in
    backticks; each must be a file of the repository (relative to the page, or to the root)."""
    missing = []
    pages = [p for p in _tracked("*.md") if not p.startswith("tests/")]
    assert "README.md" in pages
    for page in pages:
        text = (REPO / page).read_text(encoding="utf-8")
        targets = [t for t in _LINK.findall(text) if "://" not in t and not t.startswith("mailto:")]
        targets += _NAMED_PAGE.findall(text)
        for target in targets:
            here, root = (REPO / page).parent / target, REPO / target
            if not (here.exists() or root.exists()):
                missing.append(f"{page}: {target}")
    assert not missing, "\n".join(missing)
