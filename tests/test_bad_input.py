"""Hostile and broken trees: every command finishes, reports each bad file, keeps the rest.

The corpus is generated here, in tmp_path (no committed binaries): the sglang-like fixture
engine plus, under ``sglang/srt/models/bad/``, files with syntax errors, Python 2 code,
broken encodings, a BOM, NUL bytes, binary junk, an empty file, a 5 MB module, nesting past
Python's limits, symlink loops and escapes, a FIFO, a directory named ``x.py``, non-ASCII and
space-containing paths. Every bad file names a capture marker, so the byte prefilter sends
it to the full parser instead of skipping it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE
from flowtrace import api
from flowtrace.cli.main import main
from flowtrace.index import build
from flowtrace.index.build import IndexOptions

MARK = "def set_eagle3_layers_to_capture(self, layer_ids=None):\n    self.layers_to_capture = layer_ids\n"
BAD = "sglang/srt/models/bad"
UNICODE_DIR = "ünïcødé dir"

# A subclass of a capture-capable model: parses cleanly, adds a model row, adds no finding
# above info, and names a marker (in a comment) so it is fully parsed.
SUBCLASS = (
    "from sglang.srt.models.alpha import AlphaForCausalLM\n\n# layers_to_capture\n\n\nclass {name}(AlphaForCausalLM):\n"
    "    pass\n\n\nEntryClass = {name}\n"
)

# What flowtrace must say about each bad file: (diagnostic kind, words in the reason).
EXPECTED = {
    "syntax_error.py": ("parse-error", "syntax error"),
    "python2.py": ("parse-error", "syntax error"),
    "latin1_no_cookie.py": ("parse-error", "decode"),
    "bad_cookie.py": ("parse-error", "no-such-codec"),
    "nul_bytes.py": ("parse-error", "NUL"),
    "binary.py": ("parse-error", "NUL"),
    "huge.py": ("too-large", "limit"),
    "too_many_parens.py": ("parse-error", "nesting too deep"),
    "long_chain.py": ("parse-error", "nesting too deep"),
    "loop_self.py": ("unreadable", "symbolic links"),
    "loop_a.py": ("unreadable", "symbolic links"),
    "loop_b.py": ("unreadable", "symbolic links"),
    "dangling.py": ("unreadable", "cannot stat"),
    "escape.py": ("skipped", "outside the scanned root"),
    "fifo.py": ("skipped", "not a regular file"),
    "dir_named.py": ("skipped", "directory named like a Python file"),
    "unreadable.py": ("unreadable", "cannot read"),
    "\\xff\\xfebad.py": ("skipped", "not valid UTF-8"),  # shown escaped: outputs cannot encode the raw bytes
    "\\xffdir": ("skipped", "not valid UTF-8"),
}
# Odd but valid: these must parse and show up as model rows.
VALID = {
    "bom.py": "BomForCausalLM",
    "latin1_cookie.py": "LatinForCausalLM",
    f"{UNICODE_DIR}/mödel with space.py": "UnicodeForCausalLM",
    "empty.py": None,
}


def build_corpus(root: Path) -> Path:
    """The fixture engine plus the bad files; returns ``root``."""
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    bad = root / BAD
    bad.mkdir()

    def put(name: str, data: str | bytes) -> None:
        path = bad / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())

    put("syntax_error.py", "class Broken(:\n" + MARK)
    put(
        "python2.py",
        "# layers_to_capture\n"
        "print 'hello'\n"
        "class Old:\n"
        "    def set_eagle3_layers_to_capture(self, ids):\n"
        "        print ids\n",
    )
    put("latin1_no_cookie.py", ("# caf\xe9 layers_to_capture\n" + MARK).encode("latin-1"))
    put(
        "latin1_cookie.py",
        b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + SUBCLASS.format(name="LatinForCausalLM").encode("latin-1"),
    )
    put("bad_cookie.py", b"# -*- coding: no-such-codec -*-\n" + MARK.encode())
    put("bom.py", b"\xef\xbb\xbf" + SUBCLASS.format(name="BomForCausalLM").encode())
    put("nul_bytes.py", MARK.encode() + b"\x00\x00x = 1\n")
    put("binary.py", bytes(range(256)) * 8 + b"set_eagle3_layers_to_capture" + bytes(range(255, -1, -1)) * 2)
    put("empty.py", b"")
    lines = ["# layers_to_capture"] + [f"def f{i}(x):\n    return x + {i}\n" for i in range(5 * 1024 * 1024 // 30)]
    put("huge.py", "\n".join(lines))  # about 5 MB: over the 4 MB default limit
    put("too_many_parens.py", "layers_to_capture = " + "(" * 250 + "1" + ")" * 250 + "\n")  # Python allows 200
    # flat in ast; the depth limit counts each operand
    put("long_chain.py", "layers_to_capture = " + " or ".join(["a"] * 1500) + "\n")
    put(f"{UNICODE_DIR}/mödel with space.py", SUBCLASS.format(name="UnicodeForCausalLM"))
    (bad / "loop_a.py").symlink_to(bad / "loop_b.py")
    (bad / "loop_b.py").symlink_to(bad / "loop_a.py")
    (bad / "loop_self.py").symlink_to("loop_self.py")
    (bad / "dirloop").mkdir()
    (bad / "dirloop" / "up").symlink_to("..", target_is_directory=True)
    outside = root.parent / f"{root.name}_outside.py"
    outside.write_text("class Outside:\n    " + MARK.replace("\n    ", "\n        "))
    (bad / "escape.py").symlink_to(outside)
    (bad / "escape_dir").symlink_to(root.parent, target_is_directory=True)
    (bad / "dangling.py").symlink_to(bad / "does_not_exist.py")
    os.mkfifo(bad / "fifo.py")
    (bad / "dir_named.py").mkdir()
    (bad / "dir_named.py" / "__init__.py").write_text("# layers_to_capture\n")
    (bad / "unreadable.py").write_text(MARK)
    (bad / "unreadable.py").chmod(0)
    put("\udcff\udcfebad.py", MARK)  # file names that are not UTF-8 (bytes ff fe)
    put("\udcffdir/model.py", MARK)
    return root


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    """The corpus, with ``unreadable.py`` unreadable whoever runs the tests.

    chmod 000 does not stop root from reading, and the tests often run as root: then the
    read itself is made to fail with EACCES (the same error a non-root user gets), which
    exercises the same path in the indexer.
    """
    root = build_corpus(tmp_path / "tree")
    if os.geteuid() == 0:
        original = build._read

        def denied(absolute, size, max_bytes):
            if absolute.endswith("unreadable.py"):
                raise PermissionError(13, "Permission denied", absolute)
            return original(absolute, size, max_bytes)

        monkeypatch.setattr(build, "_read", denied)
    yield root
    (root / BAD / "unreadable.py").chmod(0o644)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def no_traceback(res):
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output


def scan_doc(root, *extra):
    res = invoke("scan", root, "--format", "json", "--no-cache", "--jobs", "1", *extra)
    no_traceback(res)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_every_bad_file_is_one_counted_diagnostic_and_the_rest_is_analysed(corpus):
    doc = scan_doc(corpus)
    by_file = {}
    for d in doc["diagnostics"]:
        by_file.setdefault(d["file"], []).append(d)
    for name, (kind, words) in EXPECTED.items():
        got = by_file.get(f"{BAD}/{name}")
        assert got and len(got) == 1, (name, got)
        assert got[0]["kind"] == kind and words in got[0]["reason"], (name, got)
        assert not got[0]["file"].startswith("/")
    counted = {"parse-error", "timeout", "too-large", "internal"}
    assert doc["stats"]["parse_errors"] == sum(1 for d in doc["diagnostics"] if d["kind"] in counted)
    assert doc["stats"]["parse_errors"] >= sum(1 for k, _ in EXPECTED.values() if k in counted)
    # The good model files are still analysed, and the odd-but-valid ones are parsed.
    classes = {m["class"]: m for m in doc["models"]}
    alpha = classes["AlphaForCausalLM"]
    assert alpha["support"] == "supported" and alpha["capture"]["id_transform"] == "plus_one"
    for name, cls in VALID.items():
        assert not by_file.get(f"{BAD}/{name}"), by_file.get(f"{BAD}/{name}")
        if cls:
            assert classes[cls]["file"] == f"{BAD}/{name}"
            assert classes[cls]["capture"]["setter"]["inherited"] is True
    # Nothing outside the root was read: the escaping symlinks added no class.
    assert "Outside" not in classes


def test_text_scan_and_summary_count_the_errors(corpus):
    res = invoke("scan", corpus, "--no-cache", "--jobs", "1")
    no_traceback(res)
    assert res.exit_code == 0
    assert "AlphaForCausalLM" in res.stdout and "BomForCausalLM" in res.stdout
    errors = sum(1 for k, _ in EXPECTED.values() if k in {"parse-error", "too-large"})
    assert f"{errors} errors" in res.stderr


def test_check_reports_diagnostics_without_failing_a_clean_run(corpus):
    # The fixture's own error-level findings are ignored, so the fixture alone is clean at
    # --fail-on error; the bad files add info-level findings (FT015) and nothing more.
    args = (
        "--no-cache",
        "--jobs",
        "1",
        "--fail-on",
        "error",
        "--ignore",
        "FT001,FT002,FT003,FT004,FT005,FT006,FT007,FT008,FT009,FT013,FT020,FT022",
    )
    clean = invoke("check", SGLANG_LIKE, *args, "--output-format", "json")
    assert clean.exit_code == 0, clean.output
    for fmt in ("full", "concise", "json", "json-lines", "sarif", "github"):
        res = invoke("check", corpus, *args, "--output-format", fmt)
        no_traceback(res)
        assert res.exit_code == 0, (fmt, res.output)
    res = invoke("check", corpus, *args, "--output-format", "json")
    doc = json.loads(res.stdout)
    findings = doc["findings"] if isinstance(doc, dict) else doc
    files = {f["file"] for f in findings if f["rule"] == "FT015"}
    for name, (kind, _) in EXPECTED.items():
        if kind in {"parse-error", "too-large", "unreadable"}:
            assert any(f.endswith(f"{BAD}/{name}") for f in files), (name, files)
    # Without the ignores the fixture's errors still fail the run, with or without bad files.
    assert invoke("check", corpus, "--no-cache", "--jobs", "1").exit_code == 1


def test_trace_compat_and_graph_still_work_next_to_bad_files(corpus, tmp_path):
    res = invoke(
        "trace",
        corpus,
        "-m",
        "AlphaForCausalLM",
        "--layer-ids",
        "-1,2,30",
        "-L",
        "32",
        "--no-cache",
        "--jobs",
        "1",
        "--format",
        "json",
    )
    no_traceback(res)
    assert res.exit_code == 0 and json.loads(res.stdout)
    res = invoke(
        "trace", corpus, "-m", "UnicodeForCausalLM", "--layer-ids", "-1,2,30", "-L", "32", "--no-cache", "--jobs", "1"
    )
    no_traceback(res)
    assert res.exit_code == 0 and "ünïcødé dir.mödel with space.UnicodeForCausalLM" in res.stdout
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"architectures": ["BomForCausalLM"], "num_hidden_layers": 32, "hidden_size": 64}))
    draft = tmp_path / "draft.json"
    draft.write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "target_hidden_size": 64,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 30]},
            }
        )
    )
    res = invoke("compat", corpus, "--target-config", target, "--draft-config", draft, "--no-cache", "--jobs", "1")
    no_traceback(res)
    assert res.exit_code == 0 and "MATCH" in res.stdout
    for fmt in ("json", "graphml", "dot"):
        res = invoke("graph", corpus, "--format", fmt, "--no-cache", "--jobs", "1")
        no_traceback(res)
        assert res.exit_code == 0 and res.stdout
    graph = json.loads(invoke("graph", corpus, "--no-cache", "--jobs", "1").stdout)
    assert "AlphaForCausalLM" in json.dumps(graph)


def test_report_renders_a_scan_of_the_corpus(corpus, tmp_path):
    doc = scan_doc(corpus)
    scan_file = tmp_path / "scan.json"
    scan_file.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "report.html"
    res = invoke("report", "--scan", scan_file, "-o", out)
    no_traceback(res)
    assert res.exit_code == 0
    html = out.read_text(encoding="utf-8")
    assert "BomForCausalLM" in html and "mödel with space.py" in html


@pytest.mark.parametrize(
    "content",
    [b"{", b"[1, 2]", b"\xff\xfe\x00", b"", b"null", b"{\"schema\": 5}", b"[" * 100_000],
    ids=["truncated", "not-an-object", "binary", "empty", "null", "bad-schema", "deep"],
)
def test_report_refuses_a_bad_scan_document_in_one_line(tmp_path, content):
    bad = tmp_path / "scan.json"
    bad.write_bytes(content)
    res = invoke("report", "--scan", bad, "-o", tmp_path / "r.html")
    no_traceback(res)
    assert res.exit_code == 2 and str(bad.name) in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists()


def test_report_tolerates_a_scan_document_of_the_wrong_shape(corpus, tmp_path):
    doc = scan_doc(corpus)
    for i, (key, value) in enumerate(
        [
            ("models", "x"),
            ("models", [1, None]),
            ("findings", {"a": 1}),
            ("diagnostics", [None, 3]),
            ("stats", "x"),
            ("root", 5),
        ]
    ):
        broken = dict(doc, **{key: value})
        path = tmp_path / f"scan{i}.json"
        path.write_text(json.dumps(broken))
        res = invoke("report", "--scan", path, "-o", tmp_path / f"r{i}.html")
        no_traceback(res)
        assert res.exit_code in (0, 2), (key, res.output)


def test_missing_paths_and_bad_options_exit_2(tmp_path, corpus):
    missing = tmp_path / "does-not-exist"
    for args in (
        ("scan", missing),
        ("check", missing),
        ("graph", missing),
        ("trace", missing, "-m", "AlphaForCausalLM", "-L", "32"),
        ("scan", corpus, "--jobs", "0"),
        ("scan", corpus, "--format", "yaml"),
        ("trace", corpus, "-m", "AlphaForCausalLM", "--layer-ids", "1,x", "-L", "32"),
        ("trace", corpus, "-m", "AlphaForCausalLM", "-L", "0", "--no-cache"),
        ("trace", corpus, "-m", "AlphaForCausalLM", "-L", "100000000000", "--no-cache"),
        ("trace", corpus, "-m", "NoSuchModel", "-L", "32", "--no-cache"),
        ("graph", corpus, "-m", "NoSuchModel", "--no-cache"),
        ("check", corpus, "--select", "FT999", "--no-cache"),
        ("report", "--scan", missing),
    ):
        res = invoke(*args)
        no_traceback(res)
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.strip(), args


def test_a_tree_without_python_and_a_single_file(tmp_path):
    empty = tmp_path / "no_python"
    (empty / "docs").mkdir(parents=True)
    (empty / "docs" / "README.md").write_text("set_eagle3_layers_to_capture\n")
    (empty / "data.bin").write_bytes(b"\x00" * 100)
    # a path with no engine code is a usage error (exit 2, one line) for scan as for check,
    # not a green run or an empty matrix
    for command in ("scan", "check"):
        res = invoke(command, empty, "--no-cache")
        no_traceback(res)
        assert (
            res.exit_code == 2
            and "no engine code (no Python files" in res.stderr
            and len(res.stderr.strip().splitlines()) == 1
        )
    # A single bad file as PATH: refused, saying it could not be read and where
    one = tmp_path / "one.py"
    one.write_bytes(b"\xff\xfe layers_to_capture\n")
    res = invoke("scan", one, "--no-cache")
    no_traceback(res)
    assert res.exit_code == 2 and "no engine code (1 of 1 Python file unreadable (one.py:" in res.stderr, res.stderr


def test_unicode_and_space_paths_as_the_root(tmp_path):
    root = tmp_path / "ünï côdé root"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    doc = scan_doc(root)
    assert any(m["class"] == "AlphaForCausalLM" for m in doc["models"])
    assert doc["root"].endswith("ünï côdé root")


# -- per-file limits and crash containment ----------------------------------------------------


def _slow_facts(original):
    def facts(self):
        if self.path.endswith("slow.py"):
            import time

            time.sleep(30)  # SIGALRM interrupts this
        return original(self)

    return facts


@pytest.mark.parametrize("jobs", [1, 2])
def test_size_and_time_limits_abandon_one_file_with_a_diagnostic(tmp_path, monkeypatch, jobs):
    import signal

    from flowtrace.index import visitors

    root = tmp_path / "tree"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    models = root / "sglang" / "srt" / "models"
    (models / "big.py").write_text("# layers_to_capture\n" + "x = 1\n" * 20_000)  # about 120 kB
    (models / "slow.py").write_text("# layers_to_capture\n" + MARK)
    monkeypatch.setattr(visitors.FileAnalyzer, "facts", _slow_facts(visitors.FileAnalyzer.facts))
    handler = signal.getsignal(signal.SIGALRM)
    result = api.scan(
        root, options=IndexOptions(jobs=jobs, use_cache=False, progress=False, max_bytes=64_000, timeout_s=0.5)
    )
    assert signal.getsignal(signal.SIGALRM) == handler
    diags = {d.file: d for d in result.index.diagnostics}
    big, slow = diags["sglang/srt/models/big.py"], diags["sglang/srt/models/slow.py"]
    assert big.kind == "too-large" and "64000-byte limit" in big.reason
    assert slow.kind == "timeout" and "0.5s" in slow.reason
    assert result.index.stats.parse_errors == 2
    assert result.project.row("AlphaForCausalLM").support == "supported"


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_crashing_parser_is_contained_and_reported(corpus, monkeypatch, jobs):
    """A file whose parse kills its worker with SIGSEGV (as a native parser crash would, via
    the parse test hook) is one diagnostic; the worker is replaced, every other file parsed."""
    from flowtrace.index.parse import TEST_HOOK_ENV

    expected = api.scan(corpus, options=IndexOptions(jobs=1, use_cache=False, progress=False))
    beta = next(corpus.rglob("beta.py"))
    beta.write_bytes(b"# flowtrace-test-hook: segv\n" + beta.read_bytes())
    monkeypatch.setenv(TEST_HOOK_ENV, "1")
    got = api.scan(corpus, options=IndexOptions(jobs=jobs, use_cache=False, progress=False))
    rel = beta.relative_to(corpus).as_posix()
    assert [f for f in got.index.files if f.path != rel] == [f for f in expected.index.files if f.path != rel]
    notes = [d for d in got.index.diagnostics if d not in expected.index.diagnostics]
    assert len(notes) == 1 and notes[0].file == rel and "killed by SIGSEGV" in notes[0].reason


DEEP = {
    "parens.py": "layers_to_capture = " + "(" * 5000 + "1" + ")" * 5000 + "\n",
    "lists.py": "layers_to_capture = " + "[" * 3000 + "]" * 3000 + "\n",
    "lambdas.py": "layers_to_capture = " + "lambda: " * 5000 + "1\n",
    "ors.py": "layers_to_capture = " + " or ".join(["a"] * 20_000) + "\n",
    "pluses.py": "layers_to_capture = " + "+".join(["1"] * 20_000) + "\n",
    "subscripts.py": "layers_to_capture = a" + "[0]" * 5000 + "\n",
    "elifs.py": "# layers_to_capture\nif a:\n    pass\n" + "elif a:\n    pass\n" * 5000,
}


def test_nesting_past_the_depth_limit_is_refused_before_analysis(tmp_path):
    """Nesting past ``MAX_NESTING`` is one diagnostic per file (such files once overflowed a
    native parser's stack, SIGSEGV); run in a child process so that a regression fails this
    test instead of killing the test session."""
    root = tmp_path / "deep"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    for name, text in DEEP.items():
        (root / "sglang" / "srt" / "models" / name).write_text(text)
    for jobs in ("1", "2"):
        proc = subprocess.run(
            [
                sys.executable,
                "-I",
                "-m",
                "flowtrace",
                "scan",
                str(root),
                "--format",
                "json",
                "--no-cache",
                "--jobs",
                jobs,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        doc = json.loads(proc.stdout)
        diags = {d["file"].rsplit("/", 1)[-1]: d for d in doc["diagnostics"]}
        for name in DEEP:
            assert diags[name]["kind"] == "parse-error" and "nesting too deep" in diags[name]["reason"], diags.get(name)
        assert any(m["class"] == "AlphaForCausalLM" for m in doc["models"])


def test_json_is_deterministic_on_the_corpus(corpus, monkeypatch, tmp_path):
    """Byte-identical JSON (timing fields aside): serial or pooled, cold or warm cache,
    whatever order the file system lists entries in."""
    cache = tmp_path / "cache"

    def run(*args):
        res = invoke("scan", corpus, "--format", "json", *args)
        no_traceback(res)
        doc = json.loads(res.stdout)
        for key in ("seconds", "files_from_cache", "files_parsed"):
            doc["stats"].pop(key)
        return json.dumps(doc, sort_keys=True)

    outs = [
        run("--no-cache", "--jobs", "1"),
        run("--no-cache", "--jobs", "2"),
        run("--cache-dir", cache, "--jobs", "2"),
        run("--cache-dir", cache, "--jobs", "1"),
    ]
    # The order the file system lists entries in must not matter either.
    from flowtrace.sources import discover

    real_walk = os.walk

    def reversed_walk(*args, **kwargs):
        for current, dirnames, filenames in real_walk(*args, **kwargs):
            dirnames.reverse()  # in place: pruning by the caller still applies
            filenames.reverse()
            yield current, dirnames, filenames

    monkeypatch.setattr(discover.os, "walk", reversed_walk)
    outs.append(run("--no-cache", "--jobs", "2"))
    assert len(set(outs)) == 1


def test_hostile_gitignore_patterns_are_dropped_with_a_diagnostic(tmp_path):
    """Patterns git rejects, and patterns whose regex backtracks exponentially (one such line
    used to hang a scan for minutes), are left out with a diagnostic; the rest still apply.
    Run in a child process so that a regression times out instead of hanging the session."""
    root = tmp_path / "tree"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    models = root / "sglang" / "srt" / "models"
    (models / ("a" * 200 + ".py")).write_text(MARK)
    (models / ".gitignore").write_text("a" + "*a" * 30 + "X\n" + "*" * 30 + "X\n" + "!\n[z-a]\nx\\\ndelta.py\n")
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "flowtrace", "scan", str(root), "--format", "json", "--no-cache", "--jobs", "1"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    dropped = [d for d in doc["diagnostics"] if d["file"] == "sglang/srt/models/.gitignore"]
    assert [d["line"] for d in dropped] == [1, 2, 3, 4, 5] and all(d["kind"] == "skipped" for d in dropped)
    assert "too many wildcards" in dropped[0]["reason"] and "invalid pattern" in dropped[2]["reason"]
    files = {m["file"] for m in doc["models"]}
    assert (
        "sglang/srt/models/delta.py" not in files and "sglang/srt/models/alpha.py" in files
    ), "the valid pattern still applies"


@pytest.mark.parametrize("pattern", ["a*a*a*a*a*X", "\\", "!"])
def test_a_bad_exclude_pattern_is_a_usage_error(pattern):
    for command in ("scan", "check"):
        res = invoke(command, SGLANG_LIKE, "--no-cache", "--exclude", pattern)
        no_traceback(res)
        assert res.exit_code == 2 and "exclude pattern" in res.stderr


def test_folders_nested_past_the_recursion_limit(tmp_path):
    """os.walk recurses once per level: 1,100 nested folders used to end the scan with a
    RecursionError. Built and removed level by level through directory fds (shutil.rmtree
    would itself recurse that deep)."""
    root = tmp_path / "deep"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    fds = [os.open(root, os.O_RDONLY)]
    try:
        for _ in range(1100):
            os.mkdir("d", dir_fd=fds[-1])
            fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
        with open(os.open("m.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1]), "w") as handle:
            handle.write(MARK)
        doc = scan_doc(root)
        deep = [d for d in doc["diagnostics"] if "nested deeper" in d["reason"]]
        assert len(deep) == 1 and deep[0]["kind"] == "skipped"
        assert any(m["class"] == "AlphaForCausalLM" for m in doc["models"])
        res = invoke("check", root, "--no-cache", "--jobs", "1")
        no_traceback(res)
    finally:
        os.unlink("m.py", dir_fd=fds[-1])
        for parent, child in zip(reversed(fds[:-1]), reversed(fds[1:])):
            os.close(child)
            os.rmdir("d", dir_fd=parent)
        os.close(fds[0])
