"""What keeps scans fast, checked as behaviour (never as timings):

* the full analysers read only files that name a capture marker; the class table reads only files the
  prefilter or the fixpoint selected; nothing else is parsed, and nothing is parsed twice;
* the incremental fixpoint selects exactly what the batch definition selects;
* the fast helpers equal the slow definitions they replace;
* a warm scan does not even import the analysers; progress is silent off a terminal.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixture_paths import SGLANG_LIKE, VLLM_LIKE
from flowtrace.model import facts as F
from flowtrace.index import build
from flowtrace.index.build import IndexOptions, build_index
from flowtrace.engines.profiles import Conventions, select_profiles


class _Calls:
    """Which files went to the full analysers (analyze_bytes) and to the class table. Parses run in worker
    processes, so the spies append to a log file that this process reads back."""

    def __init__(self, log):
        self.log = log

    def record(self, tier, path):
        with open(self.log, "a") as handle:
            handle.write(f"{tier}\t{path}\n")

    def __getitem__(self, tier):
        if not self.log.exists():
            return []
        return [line.split("\t", 1)[1] for line in self.log.read_text().splitlines() if line.startswith(tier + "\t")]

    def clear(self):
        self.log.unlink(missing_ok=True)


@pytest.fixture
def calls(monkeypatch, tmp_path):
    from flowtrace.index import class_table, parse

    seen = _Calls(tmp_path / "calls.log")
    full, table = parse.analyze_bytes, class_table.table_facts

    def spy_full(path, data, conv, **kw):
        if path != "warm_up.py":  # the parent's warm-up before forking workers, not a file
            seen.record("full", path)
        return full(path, data, conv, **kw)

    def spy_table(path, data, conv):
        seen.record("table", path)
        return table(path, data, conv)

    monkeypatch.setattr(parse, "analyze_bytes", spy_full)
    monkeypatch.setattr(class_table, "table_facts", spy_table)
    return seen


@pytest.mark.parametrize("root", [SGLANG_LIKE, VLLM_LIKE], ids=["sglang_like", "vllm_like"])
def test_full_analysis_reads_only_marker_files_and_each_file_once(root, calls):
    profiles = select_profiles(root, None)
    conv = Conventions.merge(profiles)
    result = build_index(root, profiles, IndexOptions(jobs=1, use_cache=False, progress=False))
    marked = {
        p.relative_to(root).as_posix() for p in root.rglob("*.py") if any(m in p.read_bytes() for m in conv.markers)
    }
    assert sorted(calls["full"]) == sorted(marked), "the full analysers read exactly the files naming a marker"
    assert not set(calls["table"]) & marked
    parsed = calls["full"] + calls["table"]
    assert len(parsed) == len(set(parsed)), "no file parsed twice"
    assert set(parsed) == {f.path for f in result.files}
    assert result.stats.files_skipped > 0, "the fixture must leave something unparsed"


def test_warm_scan_parses_nothing(tmp_path, calls):
    root = tmp_path / "engine"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    profiles = select_profiles(root, None)
    build_index(root, profiles, IndexOptions(jobs=1, progress=False))
    assert calls["full"], "the first scan parses"
    calls.clear()
    build_index(root, profiles, IndexOptions(jobs=1, progress=False))
    assert calls["full"] == [] and calls["table"] == []


# -- the fast helpers equal their definitions ------------------------------------------
_CLASS_LINE = re.compile(rb"^[ \t]*class[ \t]+\w+[ \t]*\(([^)]*)\)", re.M)
_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_CONSTRUCTOR = re.compile(rb"\b([A-Z][A-Za-z0-9_]*)\(")


def _reference_mentions(data: bytes) -> frozenset[str]:
    found = set()
    for bases in _CLASS_LINE.findall(data):
        found.update(_IDENT.findall(bases))
    found.update(_CONSTRUCTOR.findall(data))
    return frozenset(x.decode() for x in found)


TRICKY = [
    b"class A(B, c.D):\n    pass\n",
    b"    class Inner(Base):\n",
    b"\tclass T(Tab) :\n",
    b"x = 1  # see class Fake(NotABase)\nclass Real(RealBase):\n",
    b"# class Open(\nclass Hidden(HiddenBase):\n    x = Foo()\n",
    b"subclass Sub(NotThis)\nmetaclass M(Nope)\n",
    b"class  Spaced  (  S1 ,\n   S2 ) :\n",
    b"class NoParen:\n    y = Bar(1)(2)\n",
    b"class Unclosed(X\n",
    b"",
    b"z = aFoo(1) + _Bar(2) + Baz (3) + Qux(4)\n",
    b"Start(0) 1Foo(x) a.Bar(y) (Baz(z)) \xc3\xa9Qux(1) _Q(2) Q(3) A1_b(4) 9(5) Z(",
]


def test_mentions_equal_the_line_anchored_definition():
    samples = list(TRICKY)
    for base in (SGLANG_LIKE, VLLM_LIKE):
        samples += [p.read_bytes() for p in sorted(base.rglob("*.py"))]
    rng = random.Random(7)  # identifiers, calls and separators in every order
    alphabet = [b"A", b"b", b"Z", b"_", b"9", b"(", b")", b" ", b".", b"\n", b"\xc3\xa9", b"class ", b"Foo", b"x("]
    samples += [b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(2000)]
    for data in samples:
        assert build.mentions(data) == _reference_mentions(data), data[:80]


def test_module_names_follow_the_package_layout():
    expected = {
        "a.py": "a",
        "a/__init__.py": "a",
        "__init__.py": "",
        "a/b/c.py": "a.b.c",
        "a//b.py": "a.b",
        "a/b/__init__.py": "a.b",
        "x": "x",
    }
    assert {path: build.module_name(path) for path in expected} == expected


# -- the incremental fixpoint equals the batch definition --------------------------------
def _batch_selection(initial, facts_of, mentions_of):
    """The fixpoint as first written: rounds of 'relevant names' over every result so far."""
    selected = set(initial)
    while True:
        results = [facts_of[p] for p in selected]
        names: set[str] = set()
        for ff in results:
            owners = {s.class_qualname for s in ff.setters}
            names |= {c.name for c in ff.classes if c.qualname in owners}
            names |= {r.target.rsplit(".", 1)[-1] for r in ff.registry}
        changed = True
        while changed:
            changed = False
            for ff in results:
                for c in ff.classes:
                    if c.name not in names and any(b.rsplit(".", 1)[-1] in names for b in c.bases):
                        names.add(c.name)
                        changed = True
        modules = {r.target.rpartition(".")[0] for ff in results for r in ff.registry}
        new = set()
        for path, found in mentions_of.items():
            if path in selected:
                continue
            parts = build.module_name(path).split(".")
            if found & names or any(".".join(parts[i:]) in modules for i in range(len(parts))):
                new.add(path)
        if not new:
            return selected
        selected |= new


def _random_world(rng: random.Random, n: int):
    names = [f"C{i}" for i in range(n)]
    paths = [f"pkg/m{i}.py" for i in range(n)]
    facts_of, mentions_of = {}, {}
    for i, path in enumerate(paths):
        module = build.module_name(path)
        bases = tuple(f"pkg.m{j}.{names[j]}" for j in rng.sample(range(n), rng.randint(0, 2)))
        # stand-ins carrying just what the fixpoint reads (real records have more fields)
        cls = SimpleNamespace(name=names[i], qualname=f"{module}.{names[i]}", bases=bases)
        # the fixpoint reads only a setter's owner
        setters = (SimpleNamespace(class_qualname=cls.qualname),) if rng.random() < 0.05 else ()
        registry = ()
        if rng.random() < 0.05:
            j = rng.randrange(n)
            registry = (SimpleNamespace(target=f"pkg.m{j}.{names[j]}"),)
        facts_of[path] = F.FileFacts(path, module, classes=(cls,), setters=setters, registry=registry)
        mentions_of[path] = frozenset(b.rsplit(".", 1)[-1] for b in bases) | frozenset(
            rng.sample(names, rng.randint(0, 2))
        )
    initial = {p for p in paths if facts_of[p].setters or rng.random() < 0.05}
    return initial, facts_of, mentions_of


def test_incremental_fixpoint_equals_batch_rounds():
    for seed in range(40):
        rng = random.Random(seed)
        initial, facts_of, mentions_of = _random_world(rng, rng.randint(5, 60))
        expected = _batch_selection(initial, facts_of, mentions_of)
        selected: set[str] = set()
        queue: list[str] = []

        def select(path):
            if path not in selected:
                selected.add(path)
                queue.append(path)

        fixpoint = build._Fixpoint(select)
        order = list(facts_of)
        rng.shuffle(order)  # arrival order must not matter
        for path in order:
            if path in initial:
                select(path)
            else:
                fixpoint.watch(path, mentions_of[path])
            # results come back in a random order, interleaved with classification
            while queue and rng.random() < 0.7:
                fixpoint.add(facts_of[queue.pop(rng.randrange(len(queue)))])
        while queue:
            fixpoint.add(facts_of[queue.pop(rng.randrange(len(queue)))])
        assert selected == expected, seed


# -- what a scan costs beyond parsing -----------------------------------------------------
_WARM = """
import sys
from pathlib import Path
from flowtrace.index.build import IndexOptions, build_index
from flowtrace.engines.profiles import select_profiles
root = Path(sys.argv[1])
res = build_index(root, select_profiles(root, None), IndexOptions(jobs=1, progress=False))
assert res.stats.files_parsed == 0 and res.stats.files_cached > 0, res.stats
print(sorted(m for m in ("flowtrace.index.visitors", "libcst", "multiprocessing", "pathspec") if m in sys.modules))
"""


def test_warm_scan_does_not_import_the_analysers(tmp_path):
    root = tmp_path / "engine"
    shutil.copytree(VLLM_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    build_index(root, select_profiles(root, None), IndexOptions(jobs=1, progress=False))
    done = subprocess.run([sys.executable, "-c", _WARM, str(root)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # no analyser, no worker pool, no gitignore matcher


def test_default_jobs_follow_cpu_affinity():
    if hasattr(os, "sched_getaffinity"):
        assert build.available_cores() == len(os.sched_getaffinity(0))
    assert build.available_cores() >= 1


def test_progress_only_when_asked_or_on_a_terminal(capsys):
    build_index(SGLANG_LIKE, select_profiles(SGLANG_LIKE, None), IndexOptions(jobs=1, use_cache=False))
    assert capsys.readouterr().err == ""  # pytest's stderr is not a terminal
    build_index(SGLANG_LIKE, select_profiles(SGLANG_LIKE, None), IndexOptions(jobs=1, use_cache=False, progress=True))
    assert "flowtrace: parsing" in capsys.readouterr().err


def test_the_prefilter_on_fewer_markers_equals_any_marker():
    """``matters`` drops markers that contain another one; the verdict must not change."""
    from flowtrace.engines.profiles import load_all
    from flowtrace.index.parse import matters

    conv = Conventions.merge(load_all())
    samples = [p.read_bytes() for base in (SGLANG_LIKE, VLLM_LIKE) for p in sorted(base.rglob("*.py"))]
    samples += [m[1:] for m in conv.markers] + list(conv.markers) + [b"", b"x" + conv.markers[-1]]
    assert any(matters(s, conv.markers) for s in samples) and not all(matters(s, conv.markers) for s in samples)
    for data in samples:
        assert matters(data, conv.markers) == any(m in data for m in conv.markers), data[:60]
    assert matters(b"ab", (b"b", b"ab", b"")) is True  # an empty marker matches everything


def test_hit_lines_equal_the_line_by_line_definition():
    """The site collector's lines naming a site word, found by one search over the text, are
    the lines a search of each line finds."""
    from flowtrace.engines.profiles import load_all
    from flowtrace.index.visitors import _hit_lines, _site_words

    words = _site_words(Conventions.merge(load_all()))
    exact, folded = words
    definition = re.compile("|".join([*map(re.escape, exact), *(f"(?i:{re.escape(w)})" for w in folded)]))
    rng = random.Random(11)
    pieces = ["cat", "x", " ", "Pack", "pA", "ck", "c", "at", "layer", "_ids", "concat", "\t", "é", "K", "İ"]
    samples = [
        p.read_text(encoding="utf-8").split("\n")
        for base in (SGLANG_LIKE, VLLM_LIKE)
        for p in sorted(base.rglob("*.py"))
    ]
    samples += [
        ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(0, 8))]
        for _ in range(2000)
    ]
    for lines in samples:
        assert _hit_lines(lines, words) == [n for n, line in enumerate(lines, 1) if definition.search(line)], lines


def test_the_callers_meanwhile_runs_once_while_many_files_parse(tmp_path):
    """``IndexOptions.meanwhile`` (a warm-up of the stages after the index) runs once, after every
    file is classified and while the workers parse; never when a few files changed since the last
    scan (the parse is then over before a warm-up would be) or when nothing is parsed; and the
    facts are those of a scan without it."""
    root = tmp_path / "engine"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    for i in range(build._FEW_TO_PARSE + 1):  # files to read: enough to warm the parent up
        (root / f"unrelated_{i}.py").write_text(f"VALUE_{i} = {i}\n")
    profiles = select_profiles(root, None)
    runs: list[int] = []

    def meanwhile() -> Iterator[None]:  # two steps: the index hands files to its workers between them
        runs.append(len(runs))
        yield
        runs.append(-1)
        yield

    plain = build_index(root, profiles, IndexOptions(jobs=1, use_cache=False, progress=False))
    first = build_index(root, profiles, IndexOptions(jobs=1, progress=False, meanwhile=meanwhile))
    started = list(runs)
    assert started in ([0], [0, -1]), started  # started once; a step left when the pool is done stays left
    assert first.files == plain.files and first.stats.files_parsed == plain.stats.files_parsed > 0

    build_index(root, profiles, IndexOptions(jobs=1, progress=False, meanwhile=meanwhile))
    assert runs == started, "a warm scan parses nothing: nothing to overlap"
    marked = next(p for p in sorted(root.rglob("*.py")) if b"capture" in p.read_bytes())
    marked.write_bytes(marked.read_bytes() + b"\n# changed\n")
    changed = build_index(root, profiles, IndexOptions(jobs=1, progress=False, meanwhile=meanwhile))
    assert changed.stats.files_parsed == 1 and runs == started, "one file to parse: no warm-up"


_FREEZE_PROBE = (
    "import gc, sys\n"
    "from flowtrace.engines.profiles import select_profiles\n"
    "from flowtrace.index.build import IndexOptions, build_index\n"
    "from flowtrace.index.lifetime import one_shot_process\n"
    "if sys.argv[2] == 'one-shot':\n"
    "    one_shot_process()\n"
    "before = gc.get_freeze_count()\n"
    "root = __import__('pathlib').Path(sys.argv[1])\n"
    "build_index(root, select_profiles(root, None), IndexOptions(use_cache=False, jobs=1))\n"
    "print(before, gc.get_freeze_count(), gc.isenabled())\n"
)


@pytest.mark.parametrize("mode", ["one-shot", "library"])
def test_only_a_one_shot_process_freezes_the_facts_it_keeps(mode):
    """The console script declares itself one-shot, and only then does the index hand what it built to the
    permanent GC generation; a library caller's heap stays collectable; the cyclic GC is on again either way."""
    out = subprocess.run(
        [sys.executable, "-c", _FREEZE_PROBE, str(VLLM_LIKE), mode], capture_output=True, text=True, check=True
    )
    before, after, enabled = out.stdout.split()
    assert before == "0" and enabled == "True", out.stdout
    assert (int(after) > 0) == (mode == "one-shot"), out.stdout


def test_the_console_script_and_python_m_declare_one_shot():
    """Both ways in run ``flowtrace.cli.run``, which declares the process one-shot before the command."""
    pyproject = (Path(__file__).parent.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert '\nflowtrace = "flowtrace.cli:run"\n' in pyproject
    code = (
        "import atexit, runpy, sys\n"
        "import flowtrace.index.lifetime as lifetime\n"
        "sys.argv = ['flowtrace', '--version']\n"
        "atexit.register(lambda: print(lifetime._one_shot))\n"  # the process ends in run(), atexit handlers run
        "runpy.run_module('flowtrace', run_name='__main__')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("True"), out.stdout
