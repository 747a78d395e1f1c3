"""The memo of derived answers (findings, suppressions, report) is reused only while nothing
that decides them changed, and never trusted when someone else wrote it.

Expected values come from scans of the fixture engine itself: a warm scan must say exactly
what a scan without any cache says, and a changed input must change the answer.
"""

from __future__ import annotations

import dataclasses
import shutil

from fixture_paths import FIXTURES
from flowtrace.index import cache as cache_mod
from flowtrace.lint import memo as memo_mod
from flowtrace.lint.runner import run_check


def _copy(tmp_path):
    root = tmp_path / "sglang_like"
    shutil.copytree(FIXTURES / "sglang_like", root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    return root


def _check(root, **kwargs):
    return run_check(root, jobs=1, progress=False, exit_zero=True, require_engine_code=False, **kwargs)


def _answer(outcome):
    return [(f.rule, f.file, f.line, f.message) for f in outcome.findings]


def _memo_file(root):
    (path,) = (root / ".flowtrace_cache").glob("memo-*.pickle")
    return path


def _count_rule_runs(monkeypatch):
    import flowtrace.checks.run as checks_run

    runs = []
    real = checks_run.run_rules
    monkeypatch.setattr(checks_run, "run_rules", lambda *a, **k: runs.append(1) or real(*a, **k))
    return runs


def test_a_warm_scan_reuses_the_findings_and_says_the_same(tmp_path, monkeypatch):
    root = _copy(tmp_path)
    uncached = _answer(_check(root, use_cache=False))
    assert uncached, "the fixture engine has findings"
    first = _check(root)
    runs = _count_rule_runs(monkeypatch)
    warm = _check(root)
    assert _answer(first) == _answer(warm) == uncached
    assert warm.result.index.fingerprint == first.result.index.fingerprint != ""
    assert runs == []  # the rules did not run again


def test_an_edit_that_changes_facts_or_the_selection_recomputes(tmp_path, monkeypatch):
    root = _copy(tmp_path)
    first = _check(root)
    runs = _count_rule_runs(monkeypatch)
    target = root / first.findings[0].file
    target.write_text("import os  # a new first line: every fact below it moves\n" + target.read_text())
    touched = _check(root)
    assert touched.result.index.fingerprint != first.result.index.fingerprint
    assert len(runs) == 1
    assert _answer(touched) == _answer(_check(root, use_cache=False))
    runs.clear()
    assert [f.line for f in touched.findings if f.file == first.findings[0].file] == [
        f.line + 1 for f in first.findings if f.file == first.findings[0].file
    ]
    codes = sorted({f.rule for f in first.findings})
    narrowed = _check(root, select=[codes[0]])
    assert len(runs) == 1
    assert {f.rule for f in narrowed.findings} == {codes[0]}


def test_an_edit_that_leaves_the_facts_keeps_the_findings(tmp_path, monkeypatch):
    """Early cutoff: a comment appended to a file changes its content hash (it is parsed
    again) but not its facts, so the index fingerprint and the findings derived from it stand."""
    root = _copy(tmp_path)
    first = _check(root)
    runs = _count_rule_runs(monkeypatch)
    target = root / first.findings[0].file
    target.write_text(target.read_text() + "\n# changed\n")
    touched = _check(root)
    assert touched.result.index.stats.files_parsed == 1
    assert touched.result.index.fingerprint == first.result.index.fingerprint
    assert runs == []
    assert _answer(touched) == _answer(first) == _answer(_check(root, use_cache=False))


def test_a_suppression_comment_added_since_the_last_scan_applies(tmp_path):
    """A suppression comment is one of its file's facts: adding one moves the fingerprint (the
    rest of the facts stay as they were), and the warm scan applies it as one without a cache does."""
    root = _copy(tmp_path)
    first = _check(root)
    finding = first.findings[0]
    path = root / finding.file
    lines = path.read_text().splitlines(keepends=True)
    lines[finding.line - 1] = lines[finding.line - 1].rstrip("\n") + f"  # flowtrace: ignore[{finding.rule}]\n"
    path.write_text("".join(lines))
    warm = _check(root)
    assert warm.result.index.fingerprint != first.result.index.fingerprint  # the comments are facts
    edited = {ff.path: ff for ff in warm.result.files}
    for ff in first.result.files:  # nothing else moved
        assert dataclasses.replace(edited[ff.path], flowtrace_comments=ff.flowtrace_comments) == ff
    assert (finding.rule, finding.file, finding.line, finding.message) not in _answer(warm)
    same_place = [f for f in first.findings if (f.file, f.line, f.rule) == (finding.file, finding.line, finding.rule)]
    assert warm.suppressed_inline == first.suppressed_inline + len(same_place)
    assert _answer(warm) == _answer(_check(root, use_cache=False))


def test_the_report_snippets_follow_the_text(tmp_path):
    """The JSON's report part quotes source lines around each finding: a comment edited on
    such a line shows on the next warm scan although no fact changed."""
    import json

    from click.testing import CliRunner

    from flowtrace.cli.main import main

    root = _copy(tmp_path)

    def report():
        done = CliRunner().invoke(main, ["scan", str(root), "--format", "json", "-j", "1"])
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout)["report"]["sources"]

    before = report()
    finding = _check(root).findings[0]
    path = root / finding.file
    lines = path.read_text().splitlines(keepends=True)
    lines[finding.line - 1] = lines[finding.line - 1].rstrip("\n") + "  # a note for the reviewer\n"
    path.write_text("".join(lines))
    after = report()
    assert after[finding.file][str(finding.line)].endswith("# a note for the reviewer")
    assert before[finding.file][str(finding.line)] != after[finding.file][str(finding.line)]


def test_no_cache_means_no_memo(tmp_path):
    root = _copy(tmp_path)
    outcome = _check(root, use_cache=False)
    assert outcome.memo is None and outcome.result.index.fingerprint == ""
    assert not (root / ".flowtrace_cache").exists()


def test_a_planted_memo_is_not_trusted(tmp_path, monkeypatch):
    root = _copy(tmp_path)
    honest = _answer(_check(root))
    path = _memo_file(root)
    record = memo_mod._Unpickler(
        __import__("io").BytesIO(cache_mod.unseal(path.read_bytes(), cache_mod.user_key()))
    ).load()
    lying = {
        "key": record["key"],
        "parts": {k: [] if k.startswith("rules:") else v for k, v in record["parts"].items()},
    }
    import pickle

    path.write_bytes(cache_mod.seal(pickle.dumps(lying), b"k" * 32))  # another user's key
    assert _answer(_check(root)) == honest
    path.write_bytes(b"garbage")
    assert _answer(_check(root)) == honest


def test_a_memo_naming_foreign_code_is_refused(tmp_path):
    import pickle

    root = _copy(tmp_path)
    _check(root)
    path = _memo_file(root)
    path.write_bytes(
        cache_mod.seal(pickle.dumps({"key": "x", "parts": {"rules:x": shutil.rmtree}}), cache_mod.user_key())
    )
    memo = memo_mod.ResultMemo(path, cache_mod.user_key(), "x")
    assert memo.stored == {}
