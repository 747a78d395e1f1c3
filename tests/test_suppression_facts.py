"""Suppression comments are a fact the index reads once, from the bytes its worker parsed.

The lint runner takes an indexed file's ``# flowtrace: ignore[...]`` comments from its facts
(``FileFacts.flowtrace_comments``) and reads from disk only what the index did not read whole
(a file over the size limit) and files a finding names outside the index. Expected values are
written from the fixture texts below, not from the code's output.
"""

from __future__ import annotations

import dataclasses
import shutil
from typing import ClassVar

import pytest

from fixture_paths import FIXTURES
from flowtrace.checks.base import Rule
from flowtrace.engines.profiles import Conventions, select_profiles
from flowtrace.index import build
from flowtrace.index.cache import FULL_MARKER, content_hash
from flowtrace.index.comments import flowtrace_comments
from flowtrace.lint import runner
from flowtrace.lint.runner import collect_suppressions, run_check
from flowtrace.model.consequence import Consequence
from flowtrace.model.facts import Location

ALPHA = "sglang/srt/models/alpha.py"  # a model file the index reads (it registers a model)
NOTES = "notes.py"  # added by the tests: nothing in it makes the index read it


@pytest.fixture
def engine(tmp_path):
    root = tmp_path / "sglang_like"
    shutil.copytree(FIXTURES / "sglang_like", root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    return root


@pytest.fixture
def at():
    """FT998: a warning at each (file, line) in ``places`` (test-only)."""

    class At(Rule):
        code = "FT998"
        name = "test-at"
        consequence = Consequence.FRAGILE
        summary = "Test-only rule."
        rationale = "Puts findings where a test wants them."
        fix = "None needed."
        places: ClassVar[list[tuple[str, int]]] = []

        def check(self, result):
            for file, line in type(self).places:
                yield self.finding(Location(file, line), f"at {file}:{line}", None, "")

    try:
        yield At
    finally:
        Rule.registry.pop("FT998", None)


def _reads(monkeypatch) -> list[str]:
    """Every file the lint runner reads from disk for its suppression comments."""
    read: list[str] = []
    real = runner.read_source
    monkeypatch.setattr(runner, "read_source", lambda root, file: read.append(file) or real(root, file))
    return read


def _append(path, *lines: str) -> list[int]:
    text = path.read_text()
    first = len(text.splitlines()) + 1
    path.write_text(text + "".join(line + "\n" for line in lines))
    return list(range(first, first + len(lines)))


def _check(root, **kwargs):
    return run_check(root, jobs=1, progress=False, exit_zero=True, select=["FT998", "FT016"], **kwargs)


def _index(root, **kwargs):
    options = build.IndexOptions(jobs=1, progress=False, **{"use_cache": False, **kwargs})
    return build.build_index(root, select_profiles(root, None), options)


def _facts(index, path):
    (ff,) = [ff for ff in index.files if ff.path == path]
    return ff


# ----------------------------------------------------------------------------- the reader


def test_a_file_without_the_mark_has_none():
    assert flowtrace_comments(b"x = 1  # an ordinary comment\n") == ()


def test_comments_are_tokens_a_docstring_mention_is_not_one():
    data = (
        b'"""Write `# flowtrace: ignore[FT001]` to silence a finding."""\n'
        b"x = 1  # flowtrace: ignore[FT002]\n"
        b"y = '# flowtrace: ignore[FT003]'  # plain\n"
        b"# flowtrace: ignore\n"
    )
    assert flowtrace_comments(data) == ((2, "# flowtrace: ignore[FT002]"), (4, "# flowtrace: ignore"))


def test_a_file_that_does_not_tokenize_is_read_by_lines():
    # an unclosed bracket: tokenize gives up at the end; each line is read from its first '#'
    data = b"x = (\n    1,  # flowtrace: ignore[FT001]\n    '# flowtrace: ignore[FT002]',\n"
    assert flowtrace_comments(data) == ((2, "# flowtrace: ignore[FT001]"), (3, "# flowtrace: ignore[FT002]',"))


def test_the_file_encoding_is_honoured():
    data = "# -*- coding: latin-1 -*-\nname = 'é'  # flowtrace: ignore[FT001] é\n".encode("latin-1")
    assert flowtrace_comments(data) == ((2, "# flowtrace: ignore[FT001] é"),)


# ----------------------------------------------------------------------------- the index


def _tier(root, path):
    conv = Conventions.merge(select_profiles(root, None), None)
    return build.FULL if build._verdict((root / path).read_bytes(), conv.markers, ()) & FULL_MARKER else build.TABLE


def test_the_index_records_comments_in_both_tiers(engine):
    full = "sglang/srt/layers/aux_capture.py"  # the capture setter's module: full analysis
    table = "sglang/srt/models/plain.py"  # no capture marker: the class table
    assert (_tier(engine, full), _tier(engine, table)) == (build.FULL, build.TABLE)
    (full_line,) = _append(engine / full, "X = 1  # flowtrace: ignore[FT001]")
    (table_line,) = _append(engine / table, "Y = 2  # flowtrace: ignore[FT002]")
    index = _index(engine)
    assert _facts(index, full).flowtrace_comments == ((full_line, "# flowtrace: ignore[FT001]"),)
    assert _facts(index, table).flowtrace_comments == ((table_line, "# flowtrace: ignore[FT002]"),)
    assert _facts(index, "sglang/srt/models/gamma.py").flowtrace_comments == ()  # read, none there


def test_a_file_over_the_size_limit_is_not_vouched_for(engine):
    _append(engine / ALPHA, "X = 1  # flowtrace: ignore[FT998]")
    limit = (engine / ALPHA).stat().st_size - 1
    index = _index(engine, max_bytes=limit)
    alpha = [ff for ff in index.files if ff.path == ALPHA]
    assert alpha and alpha[0].flowtrace_comments is None  # only a prefix was read: the runner reads it


def test_cached_facts_carry_the_comments(engine, tmp_path):
    (line,) = _append(engine / ALPHA, "X = 1  # flowtrace: ignore[FT001]")
    cache = tmp_path / "cache"
    cold = _index(engine, use_cache=True, cache_dir=cache)
    warm = _index(engine, use_cache=True, cache_dir=cache)
    assert warm.stats.files_parsed == 0 and warm.stats.files_cached == cold.stats.files_parsed > 0
    assert _facts(warm, ALPHA).flowtrace_comments == ((line, "# flowtrace: ignore[FT001]"),)
    assert warm.files == cold.files


def test_without_a_cache_the_worker_does_not_hash(engine):
    """A scan without a cache classifies files with no digest; nothing reads the worker's hash."""
    conv = Conventions.merge(select_profiles(engine, None), None)
    limits = (build.DEFAULT_MAX_BYTES, build.DEFAULT_TIMEOUT_S)
    task = (ALPHA, str(engine / ALPHA), (engine / ALPHA).stat().st_size, build.TABLE, "")
    assert build._run_task(task, conv, limits)[:2] == (ALPHA, "")
    cached = task[:4] + ("a digest",)
    assert build._run_task(cached, conv, limits)[:2] == (ALPHA, content_hash((engine / ALPHA).read_bytes()))


# ----------------------------------------------------------------------------- the lint runner


def test_indexed_files_are_not_read_again(engine, at, monkeypatch):
    (line,) = _append(engine / ALPHA, "X = 1  # flowtrace: ignore[FT998]")
    at.places = [(ALPHA, line)]
    read = _reads(monkeypatch)
    outcome = _check(engine, use_cache=False)
    assert outcome.suppressed_inline == 1 and outcome.findings == ()
    assert read == []


def test_an_indexed_file_is_judged_by_what_the_index_read(engine, at, monkeypatch):
    """Changed on disk after the index read it: the comment the index saw still suppresses."""
    (line,) = _append(engine / ALPHA, "X = 1  # flowtrace: ignore[FT998]")
    at.places = [(ALPHA, line)]
    original = runner.collect_suppressions

    def after_an_edit(result, extra=()):
        (engine / ALPHA).write_text((engine / ALPHA).read_text().replace("ignore[FT998]", "nothing"))
        return original(result, extra)

    monkeypatch.setattr(runner, "collect_suppressions", after_an_edit)
    outcome = _check(engine, use_cache=False)
    assert outcome.suppressed_inline == 1 and outcome.findings == ()


def test_a_finding_outside_the_index_is_still_suppressible(engine, at, monkeypatch):
    (engine / NOTES).write_text("A = 1\nB = 2  # flowtrace: ignore[FT998]\n")
    at.places = [(NOTES, 2)]
    read = _reads(monkeypatch)
    outcome = _check(engine, use_cache=False)
    assert NOTES not in {ff.path for ff in outcome.result.files}
    assert outcome.suppressed_inline == 1 and outcome.findings == ()
    assert read == [NOTES]


def test_a_file_the_index_did_not_read_whole_is_read_from_disk(engine, monkeypatch):
    (line,) = _append(engine / ALPHA, "X = 1  # flowtrace: ignore[FT998]")
    result = run_check(engine, jobs=1, progress=False, exit_zero=True, use_cache=False, select=["FT016"]).result
    files = tuple(
        dataclasses.replace(ff, flowtrace_comments=None) if ff.path == ALPHA else ff for ff in result.index.files
    )
    unread = dataclasses.replace(result, index=dataclasses.replace(result.index, files=files))
    read = _reads(monkeypatch)
    comments = collect_suppressions(unread)
    assert read == [ALPHA]
    assert comments[(ALPHA, line)].codes == ("FT998",)


def test_ft016_reports_an_unused_comment_from_the_facts(engine, at, monkeypatch):
    used, unused, bare = _append(
        engine / ALPHA,
        "X = 1  # flowtrace: ignore[FT998]",
        "Y = 2  # flowtrace: ignore[FT998]",
        "Z = 3  # flowtrace: ignore",
    )
    at.places = [(ALPHA, used)]
    read = _reads(monkeypatch)
    outcome = _check(engine, use_cache=False)
    assert [(f.rule, f.file, f.line) for f in outcome.findings] == [("FT016", ALPHA, unused), ("FT016", ALPHA, bare)]
    assert outcome.suppressed_inline == 1
    assert read == []


def test_a_warm_check_applies_comments_from_cached_facts(engine, at, monkeypatch, tmp_path):
    (line,) = _append(engine / ALPHA, "X = 1  # flowtrace: ignore[FT998]")
    at.places = [(ALPHA, line)]
    cache = tmp_path / "cache"
    cold = _check(engine, cache_dir=cache)
    read = _reads(monkeypatch)
    warm = _check(engine, cache_dir=cache)
    assert warm.result.index.stats.files_parsed == 0
    assert warm.suppressed_inline == cold.suppressed_inline == 1
    assert warm.findings == cold.findings == ()
    assert read == []
