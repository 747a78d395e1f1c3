"""The fact cache: never parse an unchanged file twice.

Entries are keyed by the file's path and content hash, flowtrace's version and the profile
digest, so a changed profile or tool version invalidates them. A stat index (size, mtime)
lets a warm scan skip even hashing. Writes go to a temp file and are renamed into place, so
concurrent scans never see half an entry; an unreadable or corrupt entry is a miss.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from pathlib import Path

from flowtrace import __version__
from flowtrace.facts import FileFacts

_FORMAT = 1


def _analyzer_digest() -> str:
    """A hash of the index package's own source, so a changed analyser (a dev install, a
    patched release) never reads facts an older analyser wrote."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(here.glob("*.py")):
        try:
            h.update(path.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:12]


def default_cache_dir(root: Path) -> Path:
    """``<root>/.flowtrace_cache`` when writable, else under ``$XDG_CACHE_HOME/flowtrace``."""
    base = root if root.is_dir() else root.parent
    if os.access(base, os.W_OK):
        return base / ".flowtrace_cache"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(str(base.resolve()).encode()).hexdigest()[:16]
    return Path(xdg) / "flowtrace" / digest


class FactCache:
    def __init__(self, directory: Path, digest: str) -> None:
        self.directory = directory
        self.salt = f"{_FORMAT}:{__version__}:{_analyzer_digest()}:{digest}"
        self.usable = True
        try:
            (directory / "facts").mkdir(parents=True, exist_ok=True)
            gitignore = directory / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("*\n")
        except OSError:
            self.usable = False
        self.stat_index: dict[str, tuple[int, int, str]] = self._load_stat_index()
        self._dirty = False

    # -- stat index: path -> (size, mtime_ns, content hash) -----------------------
    def _stat_path(self) -> Path:
        return self.directory / f"stat-{hashlib.sha256(self.salt.encode()).hexdigest()[:12]}.pickle"

    def _load_stat_index(self) -> dict[str, tuple[int, int, str]]:
        if not self.usable:
            return {}
        try:
            with open(self._stat_path(), "rb") as handle:
                data = pickle.load(handle)
            return data if isinstance(data, dict) else {}
        except Exception:  # noqa: BLE001 - a corrupt index is a cold cache
            return {}

    def known_hash(self, path: str, size: int, mtime_ns: int) -> str | None:
        entry = self.stat_index.get(path)
        if entry and entry[0] == size and entry[1] == mtime_ns:
            return entry[2]
        return None

    def remember(self, path: str, size: int, mtime_ns: int, content_hash: str) -> None:
        if self.stat_index.get(path) != (size, mtime_ns, content_hash):
            self.stat_index[path] = (size, mtime_ns, content_hash)
            self._dirty = True

    def save(self) -> None:
        if self.usable and self._dirty:
            self._atomic_write(self._stat_path(), pickle.dumps(self.stat_index, protocol=pickle.HIGHEST_PROTOCOL))
            self._dirty = False

    # -- entries ---------------------------------------------------------------
    def key(self, path: str, content_hash: str) -> str:
        return hashlib.sha256(f"{self.salt}\0{path}\0{content_hash}".encode()).hexdigest()

    def _entry_path(self, key: str) -> Path:
        return self.directory / "facts" / key[:2] / f"{key}.pickle"

    def get(self, key: str) -> FileFacts | None:
        if not self.usable:
            return None
        try:
            with open(self._entry_path(key), "rb") as handle:
                value = pickle.load(handle)
        except Exception:  # noqa: BLE001 - missing or corrupt: rebuild
            return None
        return value if isinstance(value, FileFacts) else None

    def put(self, key: str, facts: FileFacts) -> None:
        if self.usable:
            self._atomic_write(self._entry_path(key), pickle.dumps(facts, protocol=pickle.HIGHEST_PROTOCOL))

    def _atomic_write(self, target: Path, data: bytes) -> None:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, target)
        except OSError:
            self.usable = False


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()
