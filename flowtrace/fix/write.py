"""Writing patches safely: what ``--write`` does, and the checks before each write.

A patch was computed from a file's text at one moment; writing it later over a file that
changed since would lose someone's edit, so each write is refused unless the file still hashes
to the text the patch was made from. Paths must stay inside the tree (no ``..``, no symlink
out), the file must be writable, a Python file's new text must still parse, and the new text
replaces the old one atomically (a temporary file in the same folder, then ``os.replace``),
keeping the file's permission bits.
"""

from __future__ import annotations

import ast
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from flowtrace.fix.model import FileEdit, text_hash


@dataclass(frozen=True, slots=True)
class WriteResult:
    path: str
    written: bool
    why: str = ""  # why it was refused


def resolve_inside(root: Path, relative: str) -> Path:
    """The file ``relative`` names under ``root``; ValueError when it leaves the tree."""
    base = root.resolve()
    target = (base / relative).resolve()
    if target != base and base not in target.parents:
        raise ValueError(f"{relative}: the path leaves the tree {root}")
    return target


def check_edit(root: Path, edit: FileEdit) -> Path:
    """The path to write ``edit`` to, or ValueError saying why it must not be written."""
    path = resolve_inside(root, edit.path)
    if not path.is_file():
        raise ValueError(f"{edit.path}: not a regular file")
    if not os.access(path, os.W_OK):
        raise ValueError(f"{edit.path}: the file is read-only")
    current = path.read_bytes().decode("utf-8")
    if text_hash(current) != edit.before_hash:
        raise ValueError(f"{edit.path}: the file changed since it was read; run the fix again")
    if path.suffix == ".py":
        try:
            ast.parse(edit.after, filename=str(path))
        except SyntaxError as exc:
            raise ValueError(
                f"{edit.path}: the patched text does not parse (line {exc.lineno}: {exc.msg}); not written"
            ) from None
    return path


def replace_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a sibling temporary file, then rename it over ``path``."""
    mode = path.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".flowtrace-fix", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with _ignored():
            os.unlink(tmp)
        raise


class _ignored:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)  # type: ignore[arg-type]


def write_edits(root: Path, edits: tuple[FileEdit, ...]) -> list[WriteResult]:
    """Check every edit first; write none when any is refused (a half-applied fix set could
    leave a wrapper calling a method another file was to gain), else write them all."""
    checked: list[tuple[Path, FileEdit]] = []
    refused: list[WriteResult] = []
    for edit in edits:
        try:
            checked.append((check_edit(root, edit), edit))
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            refused.append(WriteResult(edit.path, False, str(exc)))
    if refused:
        return refused + [
            WriteResult(e.path, False, "not written: another file of this fix set was refused") for _, e in checked
        ]
    for path, edit in checked:
        replace_atomically(path, edit.after)
    return [WriteResult(e.path, True) for _, e in checked]
