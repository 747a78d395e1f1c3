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

import pathspec

from flowtrace.model.facts import Diagnostic

ALWAYS_EXCLUDED = (".git", ".hg", ".svn", "__pycache__", ".flowtrace_cache", ".tox", ".nox", ".venv", "node_modules", ".mypy_cache", ".pytest_cache")


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


def _spec(lines: list[str], problems: list[tuple[int, str]] | None = None) -> pathspec.PathSpec:
    """The spec of ``lines``, leaving out patterns git would reject or that would take
    exponential time to match (each one noted in ``problems`` as (line number, reason))."""
    kept = []
    for number, line in enumerate(lines, 1):
        reason = _pattern_problem(line)
        if reason is None:
            kept.append(line)
        elif problems is not None:
            problems.append((number, f"pattern {line.strip()!r}: {reason}"))
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
    try:
        pathspec.GitIgnoreSpec.from_lines([line]).match_file("x")
    except Exception as exc:  # noqa: BLE001 - GitWildMatchPatternError, re.error
        return f"invalid pattern ({exc})"
    return None


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
    ignore_specs: list[tuple[str, pathspec.PathSpec]] = []
    files: list[SourceFile] = []

    def ignored(rel: str, is_dir: bool) -> bool:
        probe = rel + "/" if is_dir else rel
        if user_spec.match_file(probe):
            return True
        for base, spec in ignore_specs:
            if base and not rel.startswith(base + "/"):
                continue
            if spec.match_file(probe[len(base) + 1 :] if base else probe):
                return True
        return False

    def on_error(error: OSError) -> None:
        where = os.path.relpath(error.filename, root) if error.filename else "."
        diagnostics.append(Diagnostic(Path(where).as_posix(), 0, f"cannot list directory: {error.strerror or error}", "unreadable"))

    for current, dirnames, filenames in os.walk(root, topdown=True, onerror=on_error, followlinks=False):
        rel_dir = Path(os.path.relpath(current, root)).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        gitignore = os.path.join(current, ".gitignore")
        if os.path.isfile(gitignore) and not os.path.islink(gitignore):
            try:
                with open(gitignore, encoding="utf-8", errors="replace") as handle:
                    problems: list[tuple[int, str]] = []
                    ignore_specs.append((rel_dir, _spec(handle.read().splitlines(), problems)))
                    where = f"{rel_dir}/.gitignore" if rel_dir else ".gitignore"
                    diagnostics.extend(Diagnostic(where, number, f"{reason}; ignored", "skipped") for number, reason in problems)
            except OSError:
                pass
        keep = []
        for name in sorted(dirnames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = os.path.join(current, name)
            if _undecodable(name):
                diagnostics.append(Diagnostic(_shown(rel), 0, "folder name is not valid UTF-8 (no importable package); not scanned", "skipped"))
                continue
            if name in ALWAYS_EXCLUDED or ignored(rel, True):
                continue
            if os.path.islink(full):
                if name.endswith(".py"):
                    diagnostics.append(Diagnostic(rel, 0, "symlinked directory not followed", "skipped"))
                continue
            if name.endswith(".py"):
                diagnostics.append(Diagnostic(rel, 0, "a directory named like a Python file; its contents are scanned as a package", "skipped"))
            keep.append(name)
        if keep and rel_dir.count("/") + 1 >= _MAX_DEPTH:  # os.walk recurses once per level
            diagnostics.append(Diagnostic(rel_dir, 0, f"folders nested deeper than {_MAX_DEPTH} levels; not descended", "skipped"))
            keep = []
        dirnames[:] = keep
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if _undecodable(name):
                diagnostics.append(Diagnostic(_shown(rel), 0, "file name is not valid UTF-8 (no importable module); not read", "skipped"))
                continue
            if ignored(rel, False):
                continue
            full = os.path.join(current, name)
            try:
                if os.path.islink(full):
                    target = os.path.realpath(full)
                    if not (target == real_root or target.startswith(real_root + os.sep)):
                        diagnostics.append(Diagnostic(rel, 0, "symlink points outside the scanned root; not read", "skipped"))
                        continue
                st = os.stat(full)
            except OSError as exc:
                diagnostics.append(Diagnostic(rel, 0, f"cannot stat: {exc.strerror or exc}", "unreadable"))
                continue
            if not stat.S_ISREG(st.st_mode):
                diagnostics.append(Diagnostic(rel, 0, "not a regular file (FIFO, socket or device); not read", "skipped"))
                continue
            files.append(SourceFile(rel, full, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    files.sort(key=lambda f: f.path)
    diagnostics.sort(key=lambda d: (d.file, d.line, d.reason))
    return files, diagnostics
