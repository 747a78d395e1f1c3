"""The fact cache: hits when nothing changed, misses exactly what changed, shrugs off damage.

Every check compares a cached scan with a cold scan of the same tree, never with stored
values; the cache may only change how much is parsed, not what comes out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixture_paths import FIXTURES
from flowtrace.index import build, cache as cache_mod
from flowtrace.index.build import IndexOptions, build_index
from flowtrace.engines.profiles import select_profiles


def _copy(tmp_path, name="sglang_like"):
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    return root


def _index(root, **options):
    options.setdefault("jobs", 1)
    options.setdefault("progress", False)
    return build_index(root, select_profiles(root, None), IndexOptions(**options))


def _same(a, b):
    assert a.files == b.files
    assert a.diagnostics == b.diagnostics
    assert a.stats.files_total == b.stats.files_total
    assert a.stats.files_skipped == b.stats.files_skipped


@pytest.fixture
def no_reads(monkeypatch):
    """Fail if the index reads a source file's bytes."""
    read = []

    def refuse(absolute, size, max_bytes):
        read.append(absolute)
        raise AssertionError(f"read {absolute}")

    def arm():
        monkeypatch.setattr(build, "_read", refuse)

    return arm


def test_warm_scan_parses_and_reads_nothing(tmp_path, no_reads):
    root = _copy(tmp_path)
    cold = _index(root, use_cache=False)
    first = _index(root)
    assert (root / ".flowtrace_cache").is_dir()
    assert first.stats.files_parsed == cold.stats.files_parsed > 0 and first.stats.files_cached == 0
    no_reads()
    warm = _index(root)
    assert warm.stats.files_parsed == 0 and warm.stats.files_cached == cold.stats.files_parsed
    _same(warm, cold)


def test_one_changed_file_is_the_only_one_parsed(tmp_path):
    root = _copy(tmp_path)
    _index(root)
    model = root / "sglang/srt/models/gamma.py"
    model.write_text(model.read_text() + "\n\nclass GammaExtra(GammaForCausalLM):\n    pass\n")
    warm = _index(root)
    cold = _index(root, use_cache=False)
    _same(warm, cold)
    assert warm.stats.files_parsed == 1
    assert any(c.name == "GammaExtra" for f in warm.files for c in f.classes)


def test_a_new_subclass_in_an_unselected_file_joins_the_fixpoint_when_warm(tmp_path):
    root = _copy(tmp_path)
    _index(root)
    (root / "sglang/srt/models/zeta.py").write_text(
        "from sglang.srt.models.alpha import AlphaForCausalLM\n\n\nclass ZetaForCausalLM(AlphaForCausalLM):\n    pass\n"
    )
    warm = _index(root)
    _same(warm, _index(root, use_cache=False))
    assert "sglang/srt/models/zeta.py" in {f.path for f in warm.files}


def _count_watches(monkeypatch):
    calls = []
    real = build._Fixpoint.watch
    monkeypatch.setattr(
        build._Fixpoint, "watch", lambda self, path, names: calls.append(path) or real(self, path, names)
    )
    return calls


def test_an_unchanged_tree_takes_the_last_selection_as_it_stands(tmp_path, monkeypatch):
    root = _copy(tmp_path)
    cold = _index(root, use_cache=False)
    watches = _count_watches(monkeypatch)
    _index(root)
    assert watches, "the fixture has files the fixpoint watches"
    watches.clear()
    warm = _index(root)
    assert watches == []  # no file was watched: the selection came from the snapshot
    _same(warm, cold)


def test_a_removed_file_closes_the_fixpoint_again(tmp_path, monkeypatch):
    """A file that joined the selection through the fixpoint (a subclass of a relevant class)
    and then goes away: the stored selection no longer describes the tree and is not used."""
    root = _copy(tmp_path)
    zeta = root / "sglang/srt/models/zeta.py"
    zeta.write_text(
        "from sglang.srt.models.alpha import AlphaForCausalLM\n\n\nclass ZetaForCausalLM(AlphaForCausalLM):\n    pass\n"
    )
    first = _index(root)
    assert "sglang/srt/models/zeta.py" in {f.path for f in first.files}
    zeta.unlink()
    watches = _count_watches(monkeypatch)
    warm = _index(root)
    assert watches  # the fixpoint ran
    assert "sglang/srt/models/zeta.py" not in {f.path for f in warm.files}
    _same(warm, _index(root, use_cache=False))


def test_content_keyed_entries_survive_new_mtimes_and_other_roots(tmp_path):
    root = _copy(tmp_path)
    shared = tmp_path / "shared-cache"
    first = _index(root, cache_dir=shared)
    moved = tmp_path / "elsewhere"
    shutil.copytree(root, moved)  # new inode, ctime: every stat check misses
    for path in moved.rglob("*.py"):
        os.utime(path, ns=(1, 1))
    again = _index(moved, cache_dir=shared)
    assert again.stats.files_parsed == 0 and again.stats.files_cached == first.stats.files_parsed
    _same(again, first)


def test_corrupt_cache_files_are_misses_and_rebuilt(tmp_path):
    root = _copy(tmp_path)
    cold = _index(root, use_cache=False)
    _index(root)
    cache_dir = root / ".flowtrace_cache"
    files = [p for p in cache_dir.rglob("*.pickle")]
    assert any(p.name.startswith("snapshot-") for p in files) and len(files) > 1
    for i, path in enumerate(sorted(files)):
        blob = path.read_bytes()
        # truncated, bit-flipped, empty and plain garbage, in turn
        damaged = [blob[: len(blob) // 2], blob[:-1] + bytes([blob[-1] ^ 1]), b"", b"not a pickle"][i % 4]
        path.write_bytes(damaged)
    rebuilt = _index(root)
    _same(rebuilt, cold)
    assert rebuilt.stats.files_parsed == cold.stats.files_parsed  # nothing damaged was trusted
    warm = _index(root)
    assert warm.stats.files_parsed == 0  # and the damage was repaired
    _same(warm, cold)


def test_sealed_but_wrong_content_is_ignored(tmp_path):
    import pickle

    root = _copy(tmp_path)
    cold = _index(root, use_cache=False)
    _index(root)
    for path in (root / ".flowtrace_cache").rglob("*.pickle"):
        wrong = ("salt", {"x.py": "not a state"}, {}, ()) if path.name.startswith("snapshot-") else ["not", "facts"]
        path.write_bytes(cache_mod.seal(pickle.dumps(wrong), cache_mod.user_key()))
    again = _index(root)
    _same(again, cold)
    assert again.stats.files_parsed == cold.stats.files_parsed


def test_stale_manifest_entries_do_not_leak(tmp_path):
    """A file whose stat matches but whose cached facts are gone is read and parsed again."""
    root = _copy(tmp_path)
    cold = _index(root, use_cache=False)
    _index(root)
    shutil.rmtree(root / ".flowtrace_cache" / "facts")
    snapshot = next((root / ".flowtrace_cache").glob("snapshot-*.pickle"))
    # keep the manifest, drop the pack
    payload = cache_mod.unseal(snapshot.read_bytes(), cache_mod.user_key())
    import pickle

    salt, manifest, _pack, selection = pickle.loads(payload)
    snapshot.write_bytes(cache_mod.seal(pickle.dumps((salt, manifest, {}, selection)), cache_mod.user_key()))
    again = _index(root)
    _same(again, cold)
    assert again.stats.files_parsed == cold.stats.files_parsed


def test_unusable_cache_dir_and_no_cache(tmp_path):
    root = _copy(tmp_path)
    cold = _index(root, use_cache=False)
    assert not (root / ".flowtrace_cache").exists(), "--no-cache writes nothing"
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder should be")
    _same(_index(root, cache_dir=blocker / "cache"), cold)


def test_read_only_root_uses_xdg_cache_home(tmp_path, monkeypatch):
    root = _copy(tmp_path)
    xdg = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    real_access = os.access
    monkeypatch.setattr(cache_mod.os, "access", lambda p, mode: False if Path(p) == root else real_access(p, mode))
    where = cache_mod.default_cache_dir(root)
    assert str(where).startswith(str(xdg / "flowtrace"))
    _index(root)
    assert not (root / ".flowtrace_cache").exists() and any(where.glob("snapshot-*.pickle"))
    assert _index(root).stats.files_parsed == 0


def test_other_profile_or_analyser_never_reads_these_facts(tmp_path):
    root = _copy(tmp_path)
    _index(root)
    directory = root / ".flowtrace_cache"
    one = cache_mod.FactCache(directory, "profile-a", root=root)
    other = cache_mod.FactCache(directory, "profile-b", root=root)
    assert one.key("a.py", "h") != other.key("a.py", "h")
    assert not other.manifest


_CONCURRENT = """
import json, sys
from pathlib import Path
from flowtrace.index.build import IndexOptions, build_index
from flowtrace.engines.profiles import select_profiles
root = Path(sys.argv[1])
res = build_index(root, select_profiles(root, None), IndexOptions(jobs=1, progress=False))
print(json.dumps([repr(f) for f in res.files]))
"""


def test_concurrent_scans_share_a_cache_safely(tmp_path):
    root = _copy(tmp_path, "vllm_like")
    cold = _index(root, use_cache=False)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONCURRENT, str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out))
    assert all(o == [repr(f) for f in cold.files] for o in outputs)
    leftovers = [p for p in (root / ".flowtrace_cache").rglob(".tmp-*")]
    assert not leftovers, "a temp file was left behind"
    warm = _index(root)
    assert warm.stats.files_parsed == 0
    _same(warm, cold)
