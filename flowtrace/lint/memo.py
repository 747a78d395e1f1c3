"""What the stages after the index derived, kept for the next scan of an unchanged tree.

A warm scan takes every file's facts from the cache in a fraction of a second, then spends
most of its time re-deriving what it derived last time: the rules' findings, the inline
suppressions and the report's extras (worked examples, the graph), all pure functions of the
facts (and, for suppressions in files outside the index, of their text). So one record per
scanned root, next to the fact cache, keeps the last scan's findings, suppressions and report
under a key made of

* the index's fingerprint (the cache salt, the selection and a hash of every selected file's
  facts, see :attr:`flowtrace.model.facts.IndexResult.fingerprint`; empty, so no memo,
  without a cache): an edit that leaves the facts as they were reuses what they decided;
  a part also read from files' text (suppression comments of files the index did not read
  whole, or outside it) adds their content hashes,
* a hash of flowtrace's own source (a changed rule or renderer never reuses an old answer),
* everything of the command that shapes the answer (the rule selection, the per-file ignores).

A changed fact, profile, option or flowtrace changes the key: the record is recomputed and
replaced (the report's source snippets are never kept: they are read again each time). The record is sealed with the
fact cache's per-user MAC and unpickled with an
allow-list, as the fact cache is, so a planted record is a miss, never an answer.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from pathlib import Path
from typing import Any, Callable

from flowtrace.index.cache import atomic_write, seal, unseal, user_key

_ALLOWED_MODULES = {
    "flowtrace.model.facts",
    "flowtrace.model.consequence",
    "flowtrace.checks.base",
    "flowtrace.lint.runner",
}
_CODE_DIGEST: list[str] = []


def code_digest() -> str:
    """A hash of every module of the flowtrace package (read once per process)."""
    if not _CODE_DIGEST:
        package = Path(__file__).resolve().parent.parent
        h = hashlib.sha256()
        for path in sorted(package.rglob("*.py")):
            try:
                h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
            except OSError:
                h.update(b"unreadable")
        _CODE_DIGEST.append(h.hexdigest())
    return _CODE_DIGEST[0]


class _Unpickler(pickle.Unpickler):
    """Only flowtrace's own records (findings, suppressions, facts): a second wall behind the MAC."""

    def find_class(self, module: str, name: str) -> type:
        if module in _ALLOWED_MODULES:
            found = super().find_class(module, name)
            if isinstance(found, type) and found.__module__ == module:
                return found
        raise pickle.UnpicklingError(f"memo files may not name {module}.{name}")


class ResultMemo:
    """The last scan's derived answers for one root, valid while its key holds."""

    def __init__(self, path: Path, secret: bytes, base_key: str) -> None:
        self.path, self.secret, self.base_key = path, secret, base_key
        self.stored: dict[str, Any] = self._load()  # the record as the last scan left it
        self.fresh: dict[str, Any] = {}  # the parts this scan used, the next record
        self._written: set[str] = set()  # the parts of ``fresh`` the file holds
        self._missed = False  # a part had to be computed: the file is rewritten

    @classmethod
    def open(cls, cache_dir: Path, root: Path, fingerprint: str, shape: object) -> ResultMemo | None:
        """The memo for ``root`` in ``cache_dir``; None when the index has no fingerprint or no
        key can be had. ``shape`` is whatever of the command decides the answer (hashed by repr)."""
        secret = user_key() if fingerprint else None
        if secret is None:
            return None
        where = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
        base = hashlib.sha256(f"{fingerprint}\0{code_digest()}\0{shape!r}".encode()).hexdigest()
        return cls(cache_dir / f"memo-{where}.pickle", secret, base)

    def _load(self) -> dict[str, Any]:
        try:
            with open(self.path, "rb") as handle:
                payload = unseal(handle.read(), self.secret)
            if payload is None:
                return {}
            record = _Unpickler(io.BytesIO(payload)).load()
        except Exception:  # noqa: BLE001 - missing, foreign or corrupt: recompute
            return {}
        if (
            not isinstance(record, dict)
            or record.get("key") != self.base_key
            or not isinstance(record.get("parts"), dict)
        ):
            return {}
        parts: dict[str, Any] = record["parts"]
        return parts

    def get(self, name: str, extra: object, compute: Callable[[], Any]) -> Any:
        """The part ``name`` for ``extra`` (more of the key), from the memo or ``compute()``."""
        key = f"{name}:{hashlib.sha256(repr(extra).encode()).hexdigest()}"
        if key in self.stored:
            value = self.stored[key]
        else:
            value = compute()
            self._missed = True
        self.fresh[key] = value
        if self._missed and key not in self._written:
            self._save()  # the new record: every part used so far (a part reused after this is added then)
        return value

    def _save(self) -> None:
        """Write the parts this scan used (atomically; a failure only costs the next scan time)."""
        try:
            payload = pickle.dumps({"key": self.base_key, "parts": self.fresh}, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            return
        atomic_write(self.path, seal(payload, self.secret))
        self._written = set(self.fresh)
