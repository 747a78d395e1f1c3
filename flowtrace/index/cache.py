"""The fact cache: never parse an unchanged file twice.

Two stores live in the cache folder, both salted with the cache format, flowtrace's version,
a digest of the index package's own source and the profile digest (a changed profile, tool
version or analyser invalidates everything):

* **entries** (``facts/xx/<key>.pickle``): one file's facts, keyed by its path and content
  hash. Content-addressed, shared by every scan that uses the folder.
* a **snapshot** per scanned root (``snapshot-<id>.pickle``): the stat manifest of every file
  the last scan saw (size, mtime, ctime -> content hash, prefilter verdict and the class names
  the fixpoint matches on), the facts that scan used, in one pack, and the files it selected.
  A warm scan whose manifest matches the tree reads one file and no source at all, and takes
  the selection as it stands instead of closing the fixpoint again. The pack holds each
  entry's pickle as bytes: loading unpickles only what a scan asks for, and writing the
  snapshot after one file changed re-pickles that file's facts alone.

Every file is written to a temp file and renamed into place, so concurrent scans never see
half an entry (the last writer of a snapshot wins; each snapshot is consistent on its own).

Only entries this user wrote are trusted. The default cache folder lives inside the scanned
tree, and a tree (a checkout, an unpacked wheel) can ship a well-formed ``.flowtrace_cache``
whose facts lie; a checksum proves nothing about who wrote a file. So every file carries a
MAC (keyed BLAKE2b) under a per-user key kept outside any tree, in
``$XDG_CACHE_HOME/flowtrace/key`` (``~/.cache/flowtrace/key``), created 0600 on first use and
refused when anyone else could read it. A planted, foreign, truncated or corrupt file fails
the check and is a miss, rebuilt by the scan: never a wrong answer, never an error. (What a
file that passes the check may name when unpickled is restricted as well, in case a key leaks.)
"""

from __future__ import annotations

import copyreg
import dataclasses
import hashlib
import hmac
import io
import os
import pickle
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from flowtrace import __version__
from flowtrace.model import facts as _facts
from flowtrace.model.facts import FileFacts

_FORMAT = 4
_MAGIC = b"FTC4"
_SUM = 16  # MAC bytes in a file header
_KEY_BYTES = 32


def _analyzer_digest() -> str:
    """A hash of the index package's own source and of the fact records, so a changed
    analyser or a changed record layout (a dev install, a patched release) never reads facts
    an older one wrote (an unpickled record missing a new field would break the scan). The
    site shapes in ``sites/`` are part of the analyser: a changed shape changes facts."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(here.rglob("*.py")) + [here.parent / "model" / "facts.py"]:
        try:
            h.update(path.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:12]


def default_cache_dir(root: Path) -> Path:
    """``<root>/.flowtrace_cache`` when writable, else under ``$XDG_CACHE_HOME/flowtrace``."""
    base = root if root.is_dir() else root.parent
    if _writable(base):
        return base / ".flowtrace_cache"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(str(base.resolve()).encode()).hexdigest()[:16]
    return Path(xdg) / "flowtrace" / digest


def _writable(base: Path) -> bool:
    if not os.access(base, os.W_OK):
        return False
    existing = base / ".flowtrace_cache"
    return not existing.exists() or os.access(existing, os.W_OK)


def _reducer(cls: type, names: tuple[str, ...]) -> Callable[[object], tuple[type, tuple[object, ...]]]:
    def reduce(obj: object) -> tuple[type, tuple[object, ...]]:
        return cls, tuple([getattr(obj, name) for name in names])

    return reduce


def _dispatch_table() -> dict[type, Callable[[Any], Any]]:
    """Pickle fact records as ``Class(*fields)``: loading then runs one generated ``__init__``
    per record instead of the slotted-dataclass ``__setstate__`` loop (about twice as fast to
    load, which is most of a warm scan's own time). Field order is part of the cache salt
    (``facts.py`` is hashed), so a record never meets a pickle of another layout."""
    table: dict[type, Callable[[Any], Any]] = dict(copyreg.dispatch_table)
    for obj in vars(_facts).values():
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == _facts.__name__:
            table[obj] = _reducer(obj, tuple(f.name for f in dataclasses.fields(obj)))
    return table


_DISPATCH = _dispatch_table()


def dumps(value: object) -> bytes:
    """``pickle.dumps`` for fact records (see :func:`_dispatch_table`)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(value)
    return buffer.getvalue()


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _mac(key: bytes, payload: bytes) -> bytes:
    return hashlib.blake2b(payload, key=key, digest_size=_SUM).digest()


def seal(payload: bytes, key: bytes) -> bytes:
    """``payload`` with a header (magic + MAC under ``key``) that :func:`unseal` verifies."""
    return _MAGIC + _mac(key, payload) + payload


def unseal(blob: bytes, key: bytes) -> bytes | None:
    """The payload of a blob sealed with ``key``, or None when it is not one (another key,
    another format, damage)."""
    head = len(_MAGIC) + _SUM
    if len(blob) < head or not blob.startswith(_MAGIC):
        return None
    payload = blob[head:]
    if not hmac.compare_digest(_mac(key, payload), blob[len(_MAGIC) : head]):
        return None
    return payload


# -- the per-user key -------------------------------------------------------------------
def key_path() -> Path:
    """Where this user's cache key lives: outside every scanned tree (``FLOWTRACE_CACHE_KEY``
    names another file, e.g. for a test session)."""
    forced = os.environ.get("FLOWTRACE_CACHE_KEY")
    if forced:
        return Path(forced)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "flowtrace" / "key"


_KEYS: dict[str, bytes | None] = {}


def user_key() -> bytes | None:
    """This user's cache key, created on first use; None (no cache) when it can be neither
    read nor created, or when its file is not this user's alone."""
    path = key_path()
    where = str(path)
    if where not in _KEYS:
        key = _read_key(path)
        if key is None and not path.exists():
            _create_key(path)
            key = _read_key(path)
        _KEYS[where] = key
    return _KEYS[where]


def _read_key(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
        private = os.name != "posix" or not info.st_mode & 0o077
        if not stat.S_ISREG(info.st_mode) or not mine or not private or info.st_size != _KEY_BYTES:
            return None
        data = os.read(fd, _KEY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) == _KEY_BYTES else None


def _create_key(path: Path) -> None:
    """Write a fresh random key, 0600, atomically: a concurrent first scan either links its
    own key first or reads this one, never half a key."""
    tmp = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key-")  # mkstemp creates 0600
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(_KEY_BYTES))
        os.link(tmp, path)  # fails if another scan got there first: then its key stands
    except OSError:
        pass
    finally:
        _discard(tmp)


def _discard(tmp: str | None) -> None:
    """Remove a temp file a write left behind (if any)."""
    if tmp is not None:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def atomic_write(target: Path, data: bytes) -> bool:
    """Write ``data`` to a temp file beside ``target`` and rename it into place, so that a
    concurrent reader sees the old file or the new one, never half; False when it failed."""
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
        tmp = None
        return True
    except OSError:
        return False
    finally:
        _discard(tmp)


class _FactUnpickler(pickle.Unpickler):
    """Loads only flowtrace's own records: a second wall behind the MAC. A plain
    ``pickle.loads`` would call whatever a crafted file names, and a scan would run code."""

    def find_class(self, module: str, name: str) -> type:
        if module == "flowtrace.model.facts" or (module == __name__ and name == "FileState"):
            found = super().find_class(module, name)
            if isinstance(found, type) and found.__module__ == module:
                return found
        raise pickle.UnpicklingError(f"cache files may not name {module}.{name}")


def _loads(payload: bytes) -> Any:  # what pickle gives; every caller checks its type
    return _FactUnpickler(io.BytesIO(payload)).load()


@dataclass(frozen=True, slots=True)
class FileState:
    """What the last scan learnt about one file, valid while its stat matches.

    ``verdict`` is the prefilter's bitmask (:data:`FULL_MARKER`, :data:`REGISTRATION`);
    ``mentions`` the class names the file subclasses or constructs, sorted and joined by
    spaces (``None`` when the file was selected up front and never needed them): one string
    loads far faster than a set per file, and a warm scan never looks at most of them."""

    size: int
    mtime_ns: int
    ctime_ns: int
    digest: str
    verdict: int
    mentions: str | None

    @staticmethod
    def joined(names: frozenset[str]) -> str:
        """``mentions`` as stored for a set of names."""
        return " ".join(sorted(names))

    def mentioned(self) -> frozenset[str]:
        """The names of ``mentions`` as a set (empty when there are none)."""
        return frozenset(self.mentions.split()) if self.mentions else frozenset()


_DISPATCH[FileState] = _reducer(FileState, tuple(f.name for f in dataclasses.fields(FileState)))

FULL_MARKER = 1  # names a capture marker: full analysis
REGISTRATION = 2  # names a registration variable: at least the class table


class FactCache:
    def __init__(
        self, directory: Path, digest: str, *, root: Path | None = None, variant: str = "", key: bytes | None = None
    ) -> None:
        self.directory = directory
        self.salt = f"{_FORMAT}:{__version__}:{_analyzer_digest()}:{digest}:{variant}"
        secret = key if key is not None else user_key()
        self.usable = secret is not None  # no key, no trust: scan as with --no-cache
        self.secret = secret or b""
        # Nothing is written before save(): a scan that ends refused (no engine code) or
        # interrupted leaves no folder behind in the tree it read.
        self._unwritten: set[str] = set()  # entry keys put by this scan (their pickles are in _next_pack)
        where = str(root.resolve()) if root is not None else ""
        self._root_id = hashlib.sha256(where.encode()).hexdigest()[:12]
        self._snapshot_name = f"snapshot-{self._root_id}-{hashlib.sha256(self.salt.encode()).hexdigest()[:12]}.pickle"
        self.manifest: dict[str, FileState] = {}
        self._packed: dict[str, bytes] = {}  # cache key -> the entry's pickle
        self.selection: tuple[str, ...] | None = None  # what the last scan selected, in path order
        self._load_snapshot()
        self._next_manifest: dict[str, FileState] = {}
        self._next_pack: dict[str, bytes] = {}
        self._next_selection: tuple[str, ...] | None = None
        self._dirty = False

    # -- snapshot: manifest + pack ---------------------------------------------------
    def _snapshot_path(self) -> Path:
        return self.directory / self._snapshot_name

    def _load_snapshot(self) -> None:
        if not self.usable:
            return
        try:
            with open(self._snapshot_path(), "rb") as handle:
                payload = unseal(handle.read(), self.secret)
            if payload is None:
                return
            salt, manifest, packed, selection = _loads(payload)
            if salt != self.salt or not isinstance(manifest, dict) or not isinstance(packed, dict):
                return
            if not all(isinstance(v, FileState) for v in manifest.values()):
                return
            if not all(isinstance(v, bytes) for v in packed.values()):
                return
            if not isinstance(selection, tuple) or not all(isinstance(p, str) for p in selection):
                return
        except Exception:  # noqa: BLE001 - missing or corrupt snapshot: a cold cache
            return
        self.manifest, self._packed, self.selection = manifest, packed, selection

    def selection_for(self, states: dict[str, FileState]) -> tuple[str, ...] | None:
        """The last scan's selection when ``states`` (every file of this scan) is exactly the
        manifest that scan wrote: the selection is a function of the files' states alone
        (facts follow from content and tier), so it stands. None otherwise."""
        if self.selection is None or states.keys() != self.manifest.keys():
            return None
        manifest = self.manifest
        if any(manifest[path] is not state and manifest[path] != state for path, state in states.items()):
            return None
        return self.selection

    def select(self, paths: tuple[str, ...]) -> None:
        """Record this scan's selection for the next snapshot (path order)."""
        if paths != self._next_selection:
            self._next_selection = paths
            if paths != self.selection:
                self._dirty = True

    def known(self, path: str, size: int, mtime_ns: int, ctime_ns: int) -> FileState | None:
        """The manifest entry for ``path`` when its stat still matches, else None."""
        state = self.manifest.get(path)
        if state is not None and state.size == size and state.mtime_ns == mtime_ns and state.ctime_ns == ctime_ns:
            return state
        return None

    def remember(self, path: str, state: FileState) -> None:
        """Record ``state`` for the next snapshot (files not remembered are dropped from it)."""
        self._next_manifest[path] = state
        if self.manifest.get(path) != state:
            self._dirty = True

    def forget(self, path: str) -> None:
        """Leave ``path`` out of the next manifest (it will be read again)."""
        if self._next_manifest.pop(path, None) is not None:
            self._dirty = True

    # -- entries ---------------------------------------------------------------
    def key(self, path: str, content_hash: str) -> str:
        return hashlib.sha256(f"{self.salt}\0{path}\0{content_hash}".encode()).hexdigest()

    def _entry_path(self, key: str) -> Path:
        return self.directory / "facts" / key[:2] / f"{key}.pickle"

    def get(self, key: str) -> tuple[FileFacts | None, bytes]:
        """The entry's facts and their pickle (whose digest stands for the facts), or
        ``(None, b"")`` on a miss."""
        if not self.usable:
            return None, b""
        payload = self._packed.get(key) or self._next_pack.get(key)  # this scan's own entries are not on disk yet
        if payload is None:
            try:
                with open(self._entry_path(key), "rb") as handle:
                    payload = unseal(handle.read(), self.secret)
            except OSError:
                return None, b""
            if payload is None:
                return None, b""
            self._dirty = True  # not in the pack yet
        try:
            value = _loads(payload)
        except Exception:  # noqa: BLE001 - corrupt: rebuild
            return None, b""
        if not isinstance(value, FileFacts):
            return None, b""
        self._next_pack[key] = payload
        return value, payload

    def put(self, key: str, facts: FileFacts, payload: bytes | None = None) -> None:
        """Store ``facts`` (``payload``: their pickle, when the caller already has it)."""
        if not self.usable:
            return
        if payload is None:
            payload = dumps(facts)
        self._next_pack[key] = payload
        self._dirty = True
        self._unwritten.add(key)

    def _create(self) -> bool:
        """The cache folder, made on the first write, with a ``.gitignore`` so a checkout never
        shows it; False when it cannot be made (the scan goes on uncached)."""
        try:
            (self.directory / "facts").mkdir(parents=True, exist_ok=True)
            gitignore = self.directory / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("*\n")
        except OSError:
            self.usable = False
        return self.usable

    def save(self) -> None:
        """Write this scan's new entries and its snapshot (manifest and pack), when anything
        changed. The only method that writes: the index calls it once, at the end of a scan of
        a tree with engine code."""
        if not self.usable:
            return
        if (
            not self._dirty
            and self._next_manifest.keys() == self.manifest.keys()
            and self._next_pack.keys() == self._packed.keys()
        ):
            return
        if not self._create():
            return
        for key in sorted(self._unwritten):
            self._atomic_write(self._entry_path(key), seal(self._next_pack[key], self.secret))
        self._unwritten.clear()
        payload = dumps((self.salt, self._next_manifest, self._next_pack, self._next_selection))
        self._atomic_write(self._snapshot_path(), seal(payload, self.secret))
        self._prune()
        self.manifest, self._packed, self.selection = self._next_manifest, self._next_pack, self._next_selection
        self._next_manifest, self._next_pack = dict(self.manifest), dict(self._packed)
        self._dirty = False

    def _prune(self) -> None:
        """Delete this root's snapshots written under another salt (an older flowtrace, analyser
        or profile): they can never match again and each holds a whole pack."""
        try:
            stale = [
                p for p in self.directory.glob(f"snapshot-{self._root_id}-*.pickle") if p.name != self._snapshot_name
            ]
            stale += list(self.directory.glob("stat-*.pickle"))  # the first format's stat index
            for path in stale:
                path.unlink(missing_ok=True)
        except OSError:
            pass

    def _atomic_write(self, target: Path, data: bytes) -> None:
        if not atomic_write(target, data):
            self.usable = False
