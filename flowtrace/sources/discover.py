"""Walk a tree and list the Python files a scan may read.

The walk never follows symlinked directories (no loops, no escaping the root), keeps
symlinked files only when they resolve inside the root, honours ``.gitignore`` files and
``--exclude`` patterns (gitignore syntax, via pathspec), and reports everything it skips
as a diagnostic instead of dropping it silently.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from flowtrace.model.facts import Diagnostic, DiagnosticKind

if TYPE_CHECKING:
    import pathspec

ALWAYS_EXCLUDED = (
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".flowtrace_cache",
    ".tox",
    ".nox",
    ".venv",
    "node_modules",
    ".mypy_cache",
    ".pytest_cache",
)


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str  # POSIX, relative to the root
    absolute: str
    size: int
    mtime_ns: int
    ctime_ns: int = 0  # with size and mtime, what the fact cache's stat check compares


_MAX_DEPTH = 200


def _undecodable(name: str) -> bool:
    """A name whose bytes are not UTF-8 (os.walk hands them over as lone surrogates, which no
    output can encode)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _shown(rel: str) -> str:
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _spec(lines: list[str], problems: list[tuple[int, str]] | None = None) -> pathspec.PathSpec[Any] | None:
    """The spec of ``lines``, leaving out patterns git would reject or that would take
    exponential time to match (each one noted in ``problems`` as (line number, reason));
    None when no pattern is left (pathspec is imported only for a tree that has one)."""
    kept = []
    for number, line in enumerate(lines, 1):
        reason = _pattern_problem(line)
        if reason is None:
            kept.append(line)
        elif problems is not None:
            problems.append((number, f"pattern {line.strip()!r}: {reason}"))
    if not any(line.strip() and not line.strip().startswith("#") for line in kept):
        return None
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(kept)


def _pattern_problem(line: str) -> str | None:
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    # pathspec turns each '*' into a backtracking '[^/]*': a hostile .gitignore line such as
    # 'a*a*a*a*a*X' makes one match run for minutes. Bound the backtracking choices.
    segments = text.strip("/").split("/")
    extra = sum(max(0, seg.count("*") - 1) for seg in segments if seg != "**")  # '***' is three
    extra += max(0, sum(1 for seg in segments if seg == "**") - 1)
    if extra > 2:
        return "too many wildcards to match safely"
    import pathspec

    try:
        pathspec.GitIgnoreSpec.from_lines([line]).match_file("x")
    except Exception as exc:  # noqa: BLE001 - GitWildMatchPatternError, re.error
        return f"invalid pattern ({exc})"
    return None


def _listing(
    folder: str, on_error: Callable[[OSError], None]
) -> tuple[list[os.DirEntry[str]], list[os.DirEntry[str]]] | None:
    """``(folders, other entries)`` of ``folder``, each sorted by name, as ``os.walk`` splits
    them (a symlink to a folder counts as a folder); None when it cannot be listed. One
    ``scandir`` instead of ``os.walk`` plus a ``stat`` per name: the entries already know
    which are symlinks."""
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as error:
        on_error(error)
        return None
    folders: list[os.DirEntry[str]] = []
    others: list[os.DirEntry[str]] = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        (folders if is_dir else others).append(entry)
    return folders, others


def _is_plain_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _source_file(entry: os.DirEntry[str], rel: str, real_root: str, diagnostics: list[Diagnostic]) -> SourceFile | None:
    """The file ``entry`` as a scan reads it, or None (with a diagnostic) when it is not read:
    a symlink out of the root, something that is not a regular file, a failing stat."""
    try:
        if entry.is_symlink():
            target = os.path.realpath(entry.path)
            if not (target == real_root or target.startswith(real_root + os.sep)):
                diagnostics.append(
                    Diagnostic(rel, 0, "symlink points outside the scanned root; not read", DiagnosticKind.SKIPPED)
                )
                return None
            st = os.stat(entry.path)
        else:
            st = entry.stat(follow_symlinks=False)
    except OSError as exc:
        diagnostics.append(Diagnostic(rel, 0, f"cannot stat: {exc.strerror or exc}", DiagnosticKind.UNREADABLE))
        return None
    if not stat.S_ISREG(st.st_mode):
        diagnostics.append(
            Diagnostic(rel, 0, "not a regular file (FIFO, socket or device); not read", DiagnosticKind.SKIPPED)
        )
        return None
    return SourceFile(rel, entry.path, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def discover(root: Path, excludes: tuple[str, ...] = ()) -> tuple[list[SourceFile], list[Diagnostic]]:
    """Python files under ``root`` (or ``root`` itself when it is a file), sorted by path."""
    diagnostics: list[Diagnostic] = []
    if root.is_file():
        st = root.stat()
        return [SourceFile(root.name, str(root), st.st_size, st.st_mtime_ns, st.st_ctime_ns)], diagnostics
    real_root = os.path.realpath(root)
    rejected: list[tuple[int, str]] = []
    user_spec = _spec(list(excludes), rejected)
    if rejected:
        from flowtrace.errors import UsageError

        raise UsageError(f"exclude {rejected[0][1]}")
    ignore_specs: list[tuple[str, pathspec.PathSpec[Any]]] = []
    files: list[SourceFile] = []

    def ignored(rel: str, is_dir: bool) -> bool:
        probe = rel + "/" if is_dir else rel
        if user_spec is not None and user_spec.match_file(probe):
            return True
        for base, spec in ignore_specs:
            if base and not rel.startswith(base + "/"):
                continue
            if spec.match_file(probe[len(base) + 1 :] if base else probe):
                return True
        return False

    def on_error(error: OSError) -> None:
        where = os.path.relpath(error.filename, root) if error.filename else "."
        diagnostics.append(
            Diagnostic(
                Path(where).as_posix(),
                0,
                f"cannot list directory: {error.strerror or error}",
                DiagnosticKind.UNREADABLE,
            )
        )

    pending: list[tuple[str, str]] = [(str(root), "")]  # (folder, its path relative to root)
    while pending:
        current, rel_dir = pending.pop()
        listed = _listing(current, on_error)
        if listed is None:
            continue
        subdirs, entries = listed
        _read_gitignore(entries, rel_dir, ignore_specs, diagnostics)
        pending.extend(reversed(_folders_to_descend(subdirs, rel_dir, ignored, diagnostics)))
        files.extend(_python_files(entries, rel_dir, ignored, real_root, diagnostics))
    files.sort(key=lambda f: f.path)
    diagnostics.sort(key=lambda d: (d.file, d.line, d.reason))
    return files, diagnostics


def _read_gitignore(
    entries: list[os.DirEntry[str]],
    rel_dir: str,
    ignore_specs: list[tuple[str, pathspec.PathSpec[Any]]],
    diagnostics: list[Diagnostic],
) -> None:
    """Add the folder's own ``.gitignore`` (if a plain, readable file) to ``ignore_specs``
    before its entries are filtered, so its patterns apply to this folder and below;
    its malformed lines become diagnostics rather than errors."""
    gitignore = next((e for e in entries if e.name == ".gitignore"), None)
    if gitignore is None or not _is_plain_file(gitignore):
        return
    try:
        with open(gitignore.path, encoding="utf-8", errors="replace") as handle:
            problems: list[tuple[int, str]] = []
            spec = _spec(handle.read().splitlines(), problems)
            if spec is not None:
                ignore_specs.append((rel_dir, spec))
            where = f"{rel_dir}/.gitignore" if rel_dir else ".gitignore"
            diagnostics.extend(
                Diagnostic(where, number, f"{reason}; ignored", DiagnosticKind.SKIPPED) for number, reason in problems
            )
    except OSError:
        pass


def _folders_to_descend(
    subdirs: list[os.DirEntry[str]], rel_dir: str, ignored: Callable[[str, bool], bool], diagnostics: list[Diagnostic]
) -> list[tuple[str, str]]:
    """The subfolders of ``rel_dir`` to walk next, as (path, relative path), in listing order.

    Kept apart from the walk so that the reasons a folder is not descended (undecodable
    name, excluded, symlinked, too deep) read in one place, each with its diagnostic."""
    keep = []
    for entry in subdirs:
        name = entry.name
        rel = f"{rel_dir}/{name}" if rel_dir else name
        if _undecodable(name):
            diagnostics.append(
                Diagnostic(
                    _shown(rel),
                    0,
                    "folder name is not valid UTF-8 (no importable package); not scanned",
                    DiagnosticKind.SKIPPED,
                )
            )
            continue
        if name in ALWAYS_EXCLUDED or ignored(rel, True):
            continue
        if entry.is_symlink():
            if name.endswith(".py"):
                diagnostics.append(Diagnostic(rel, 0, "symlinked directory not followed", DiagnosticKind.SKIPPED))
            continue
        if name.endswith(".py"):
            diagnostics.append(
                Diagnostic(
                    rel,
                    0,
                    "a directory named like a Python file; its contents are scanned as a package",
                    DiagnosticKind.SKIPPED,
                )
            )
        keep.append((entry.path, rel))
    if keep and rel_dir.count("/") + 1 >= _MAX_DEPTH:
        diagnostics.append(
            Diagnostic(
                rel_dir, 0, f"folders nested deeper than {_MAX_DEPTH} levels; not descended", DiagnosticKind.SKIPPED
            )
        )
        keep = []
    return keep


def _python_files(
    entries: list[os.DirEntry[str]],
    rel_dir: str,
    ignored: Callable[[str, bool], bool],
    real_root: str,
    diagnostics: list[Diagnostic],
) -> list[SourceFile]:
    """The ``.py`` files among ``entries`` that a scan reads, in listing order; the
    others are dropped here, with a diagnostic where the user should hear why."""
    files: list[SourceFile] = []
    for entry in entries:
        name = entry.name
        if not name.endswith(".py"):
            continue
        rel = f"{rel_dir}/{name}" if rel_dir else name
        if _undecodable(name):
            diagnostics.append(
                Diagnostic(
                    _shown(rel),
                    0,
                    "file name is not valid UTF-8 (no importable module); not read",
                    DiagnosticKind.SKIPPED,
                )
            )
            continue
        if ignored(rel, False):
            continue
        found = _source_file(entry, rel, real_root, diagnostics)
        if found is not None:
            files.append(found)
    return files
