"""The fact cache trusts only what this user wrote.

A tree can ship its own ``.flowtrace_cache`` (the default cache folder is inside the tree):
a well-formed entry whose facts lie must be a miss, never an answer. Entries carry a MAC
under a per-user key kept outside the tree; these tests plant entries that are well formed
in every other way and check that the scan re-parses instead of believing them.
"""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from fixture_paths import FIXTURES
from flowtrace.model import facts as F
from flowtrace.index import cache as cache_mod
from flowtrace.index.build import IndexOptions, build_index
from flowtrace.engines.profiles import select_profiles


def _copy(tmp_path):
    root = tmp_path / "sglang_like"
    shutil.copytree(FIXTURES / "sglang_like", root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    return root


def _index(root, **options):
    return build_index(root, select_profiles(root, None), IndexOptions(jobs=1, progress=False, **options))


def _lie(path: str) -> F.FileFacts:
    """Facts no fixture file has: a class that does not exist."""
    return F.FileFacts(
        path, "planted", classes=(F.ClassFact("Planted", "planted.Planted", F.Location(path, 1), (), (), ()),)
    )


def _plant(root, key: bytes) -> int:
    """Replace every entry of the tree's cache with lying facts sealed under ``key``, and the
    snapshot (manifest and pack) with one whose pack holds the same lies."""
    cache_dir = root / ".flowtrace_cache"
    entries = sorted(cache_dir.glob("facts/*/*.pickle"))
    (snapshot,) = cache_dir.glob("snapshot-*.pickle")
    salt, manifest, pack, selection = cache_mod._loads(cache_mod.unseal(snapshot.read_bytes(), cache_mod.user_key()))
    lying_pack = {k: cache_mod.dumps(_lie(cache_mod._loads(v).path)) for k, v in pack.items()}
    snapshot.write_bytes(cache_mod.seal(cache_mod.dumps((salt, manifest, lying_pack, selection)), key))
    for entry in entries:
        good = cache_mod._loads(cache_mod.unseal(entry.read_bytes(), cache_mod.user_key()))
        entry.write_bytes(cache_mod.seal(cache_mod.dumps(_lie(good.path)), key))
    return len(entries)


def _planted_classes(result):
    return [c for f in result.files for c in f.classes if c.name == "Planted"]


def test_a_planted_lying_cache_is_not_trusted(tmp_path):
    root = _copy(tmp_path)
    cold = _index(root, use_cache=False)
    _index(root)  # writes the tree's own cache under this user's key
    assert _plant(root, key=os.urandom(32)) > 0  # someone else's key: what a shipped cache has
    again = _index(root)
    assert not _planted_classes(again)
    assert again.files == cold.files and again.diagnostics == cold.diagnostics
    assert again.stats.files_parsed == cold.stats.files_parsed and again.stats.files_cached == 0


def test_the_same_lie_under_this_users_key_would_be_believed(tmp_path):
    """The control for the test above: the MAC is what refuses the planted entries (if the
    key leaked, a lie would be read; so the key must stay private)."""
    root = _copy(tmp_path)
    _index(root)
    _plant(root, key=cache_mod.user_key())
    assert _planted_classes(_index(root))


def test_the_key_is_private_and_outside_the_tree(tmp_path):
    root = _copy(tmp_path)
    _index(root)
    where = cache_mod.key_path()
    assert root not in where.parents
    assert stat.S_IMODE(where.stat().st_mode) == 0o600
    assert not list(root.rglob("key"))


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_key_others_can_read_turns_the_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWTRACE_CACHE_KEY", str(tmp_path / "xdg" / "flowtrace" / "key"))
    key = cache_mod.key_path()
    key.parent.mkdir(parents=True)
    key.write_bytes(b"k" * 32)
    key.chmod(0o644)
    root = _copy(tmp_path)
    cold = _index(root, use_cache=False)
    got = _index(root)
    assert not (root / ".flowtrace_cache").exists(), "no trustworthy key: nothing cached"
    assert got.files == cold.files
    assert cache_mod.user_key() is None


def test_a_fresh_key_is_created_once_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWTRACE_CACHE_KEY", str(tmp_path / "xdg" / "flowtrace" / "key"))
    first = cache_mod.user_key()
    assert first is not None and len(first) == 32
    cache_mod._KEYS.clear()  # as a new process would
    assert cache_mod.user_key() == first
    assert [p.name for p in cache_mod.key_path().parent.iterdir()] == ["key"], "no temp file left"
