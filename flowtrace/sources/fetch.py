"""The ``pypi:NAME==VERSION`` source: download a wheel and unpack it safely, never running it.

Only wheels are fetched. ``pip download`` of an sdist prepares its metadata by running the
package's ``setup.py`` / PEP 517 build hooks (checked with a planted sentinel: even
``--no-build-isolation`` runs them), so an sdist-only release is refused with a one-line
error instead. A wheel is a zip: we read it with :mod:`zipfile` and write its members
ourselves, refusing absolute paths, ``..``, links, device files and oversized content.
Symlinks are never created (a link inside the archive is skipped, one pointing outside it
makes the archive unsafe), so a later member can never be written through a link.

Unpacked trees are cached under ``$XDG_CACHE_HOME/flowtrace/pypi/NAME-VERSION`` (or
``CACHE_DIR/pypi/NAME-VERSION``) and reused; a tree appears there by an atomic rename, so a
half-unpacked one is never reused. Extra pip arguments (``--find-links DIR``, ``--index-url
URL``, ``--no-index``) come from ``$FLOWTRACE_PIP_ARGS``; ``--only-binary=:all:`` is always
passed last, so they cannot turn sdists back on.

Reading needs any wheel, not one installable here: when no wheel fits this interpreter (a
release built only for other Python versions or platforms), the download is retried for other
CPython versions and the common Linux platforms (``--python-version``, ``--platform``,
``--abi``, ``--ignore-requires-python``); the tree's Python source is the same in each.
Progress, when stderr is a terminal: a line when the download starts, pip's own progress bar,
and a line when it is done (in a pipe or a CI log an error stays one line).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import IO

MAX_TOTAL_BYTES = 4 * 1024**3  # unpacked size of one archive
MAX_MEMBERS = 200_000
PIP_TIMEOUT_S = 900

# Compiled artefacts a static scan never reads: validated, not written.
_SKIP_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".a", ".o", ".lib", ".exe", ".cubin", ".fatbin")

_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.+!_-]*[A-Za-z0-9])?$")


def _usage_error(message: str) -> Exception:
    from flowtrace.errors import UsageError

    return UsageError(message)


class UnsafeArchive(Exception):
    """An archive member that would land outside the target or is not a plain file/folder."""


def parse_spec(spec: str) -> tuple[str, str]:
    """``NAME==VERSION`` -> (normalised name, version); one-line UsageError otherwise."""
    name, sep, version = spec.strip().partition("==")
    name, version = name.strip(), version.strip()
    if not sep or not _NAME.match(name) or not _VERSION.match(version):
        raise _usage_error(f"pypi:{spec}: expected pypi:NAME==VERSION (e.g. pypi:sglang==0.5.23)")
    return re.sub(r"[-_.]+", "-", name).lower(), version


def default_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "flowtrace" / "pypi"


def fetch_pypi(spec: str, cache_dir: str | Path | None = None) -> Path:
    """Download ``NAME==VERSION``'s wheel (no deps, no build) and return the unpacked tree."""
    name, version = parse_spec(spec)
    base = Path(cache_dir) / "pypi" if cache_dir else default_cache_root()
    target = base / f"{name}-{version}"
    if target.is_dir() and not target.is_symlink():
        return target
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _usage_error(f"pypi:{spec}: cannot create the cache folder {base} ({exc.strerror or exc})") from None
    work = Path(tempfile.mkdtemp(prefix=f".{name}-{version}.", dir=base))
    try:
        wheel = _download(spec, name, version, work / "download")
        staging = work / "tree"
        try:
            safe_extract(wheel, staging)
        except UnsafeArchive as exc:
            raise _usage_error(f"pypi:{spec}: unsafe archive {wheel.name}: {exc}") from None
        except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as exc:
            raise _usage_error(f"pypi:{spec}: cannot unpack {wheel.name}: {exc}") from None
        try:
            os.rename(staging, target)
        except OSError:
            if not target.is_dir():  # lost a race with another fetch, or a real failure
                raise _usage_error(f"pypi:{spec}: cannot move the unpacked tree to {target}") from None
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


# Other interpreters a release may have wheels for, newest first (tried only when no wheel
# fits this one), and the platforms engine wheels are built for; pure wheels match any.
OTHER_PYTHONS = ("3.13", "3.12", "3.11", "3.10", "3.14", "3.9", "3.8")
OTHER_PLATFORMS = (
    "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64",
    "manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64",
)


def _other_targets() -> list[list[str]]:
    """pip options that ask for a wheel built for another CPython (any common Linux platform)."""
    platforms = [arg for p in OTHER_PLATFORMS for arg in ("--platform", p)]
    out = []
    for version in OTHER_PYTHONS:
        abi = "cp" + version.replace(".", "")
        out.append(
            [
                "--ignore-requires-python",
                "--python-version",
                version,
                "--implementation",
                "cp",
                "--abi",
                abi,
                "--abi",
                "abi3",
                "--abi",
                "none",
                *platforms,
            ]
        )
    return out


def _interactive() -> bool:
    """Progress is for a person at a terminal; in a pipe or CI log an error stays one line."""
    return sys.stderr.isatty()


def _progress(message: str) -> None:
    if _interactive():
        print(f"flowtrace: {message}", file=sys.stderr, flush=True)


def _download(spec: str, name: str, version: str, dest: Path) -> Path:
    dest.mkdir(parents=True)
    try:
        extra = shlex.split(os.environ.get("FLOWTRACE_PIP_ARGS", ""))
    except ValueError as exc:
        raise _usage_error(f"FLOWTRACE_PIP_ARGS: cannot split ({exc})") from None
    env = {
        k: v for k, v in os.environ.items() if k not in {"PIP_NO_BINARY", "PIP_ONLY_BINARY", "PIP_REQUIRE_VIRTUALENV"}
    }
    env["PIP_ONLY_BINARY"] = ":all:"
    _progress(f"downloading the {name}=={version} wheel (pip download, no dependencies, never installed)")
    first: subprocess.CompletedProcess[str] | None = None
    proc: subprocess.CompletedProcess[str] | None = None
    for target in ([], *_other_targets()):
        proc = _pip_download(spec, name, version, dest, extra, target, env)
        first = first or proc
        if proc.returncode == 0 and any(dest.glob("*.whl")):
            if target:
                _progress(
                    f"no {name}=={version} wheel fits this Python; read the one built for Python"
                    f" {target[target.index('--python-version') + 1]}"
                )
            break
    else:
        proc = first  # the error pip gave for this interpreter is the one to show
    wheels = sorted(dest.glob("*.whl"))
    if wheels:
        _progress(f"downloaded {wheels[0].name} ({wheels[0].stat().st_size / 1e6:.1f} MB)")
    others = sorted(p.name for p in dest.iterdir() if p.suffix != ".whl")
    if proc is None or proc.returncode != 0 or not wheels:
        lines = (
            [ln.strip() for ln in ((proc.stderr or "") + "\n" + (proc.stdout or "")).splitlines() if ln.strip()]
            if proc is not None
            else []
        )
        errors = [ln for ln in lines if ln.startswith("ERROR")]
        why = (errors or lines or ["no wheel downloaded"])[-1]
        raise _usage_error(
            f"pypi:{spec}: no wheel could be downloaded ({why}); flowtrace fetches wheels only, because "
            "preparing an sdist runs its build code — unpack an sdist yourself and scan the folder"
        )
    if others or len(wheels) != 1:
        raise _usage_error(
            f"pypi:{spec}: unexpected download result {', '.join(p.name for p in wheels) or ''} {' '.join(others)}"
            .rstrip()
        )
    return wheels[0]


def _pip_download(
    spec: str, name: str, version: str, dest: Path, extra: list[str], target: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """One ``pip download``; pip's progress bar shows on a terminal, else its output is kept
    for the error line."""
    live = _interactive() and not target  # retries stay quiet: their failures are expected
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-input",
        "--disable-pip-version-check",
        *([] if live else ["--quiet"]),
        "--dest",
        str(dest),
        *extra,
        *target,
        "--only-binary=:all:",
        f"{name}=={version}",
    ]
    try:
        if live:
            done = subprocess.run(
                command,
                stdout=sys.stderr,
                stderr=subprocess.PIPE,
                text=True,
                timeout=PIP_TIMEOUT_S,
                env=env,
                stdin=subprocess.DEVNULL,
            )
            return subprocess.CompletedProcess(command, done.returncode, "", done.stderr or "")
        return subprocess.run(
            command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, env=env, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise _usage_error(f"pypi:{spec}: pip download timed out after {PIP_TIMEOUT_S}s") from None
    except OSError as exc:
        raise _usage_error(f"pypi:{spec}: cannot run pip ({exc.strerror or exc})") from None


# -- safe extraction ------------------------------------------------------------------------


def _member_parts(name: str) -> tuple[str, ...]:
    """Validated relative path parts of an archive member name."""
    if "\x00" in name:
        raise UnsafeArchive(f"member name {name!r} contains a NUL byte")
    clean = name.replace("\\", "/")
    if clean.startswith("/") or re.match(r"^[A-Za-z]:", clean):
        raise UnsafeArchive(f"member {name!r} has an absolute path")
    parts = tuple(p for p in PurePosixPath(clean).parts if p not in ("", "."))
    if ".." in parts:
        raise UnsafeArchive(f"member {name!r} climbs out of the target with '..'")
    return parts


def _link_inside(member_parts: tuple[str, ...], link_target: str, *, relative_to_member: bool) -> bool:
    """Does a link target stay inside the archive root (lexically)?"""
    target = link_target.replace("\\", "/")
    if target.startswith("/") or re.match(r"^[A-Za-z]:", target):
        return False
    stack = list(member_parts[:-1]) if relative_to_member else []
    for part in PurePosixPath(target).parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return False
            stack.pop()
        else:
            stack.append(part)
    return True


def _open_inside(root: Path, parts: tuple[str, ...]) -> int:
    """Create the parent folders (refusing any link on the way) and open the file for writing."""
    _open_dirs(root, parts[:-1])
    current = root.joinpath(*parts[:-1])
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    path = current / parts[-1]
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise UnsafeArchive(f"{'/'.join(parts)}: exists and is not a plain file")
    except FileNotFoundError:
        pass
    return os.open(path, flags, 0o644)


class _Budget:
    def __init__(self) -> None:
        self.total = 0
        self.members = 0

    def member(self) -> None:
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise UnsafeArchive(f"more than {MAX_MEMBERS} members")

    def add(self, n: int) -> None:
        self.total += n
        if self.total > MAX_TOTAL_BYTES:
            raise UnsafeArchive(f"unpacks to more than {MAX_TOTAL_BYTES} bytes")


def _copy(source: IO[bytes], root: Path, parts: tuple[str, ...], budget: _Budget) -> None:
    fd = _open_inside(root, parts)
    with os.fdopen(fd, "wb") as out:
        while True:
            chunk = source.read(1 << 20)
            if not chunk:
                break
            budget.add(len(chunk))
            out.write(chunk)


def _skipped(parts: tuple[str, ...]) -> bool:
    """Not written: compiled artefacts, and any fact cache an archive ships (never trusted)."""
    return parts[-1].lower().endswith(_SKIP_SUFFIXES) or ".so." in parts[-1] or ".flowtrace_cache" in parts


def safe_extract(archive: str | Path, dest: str | Path) -> Path:
    """Unpack a zip/wheel or tar archive into ``dest`` (created), refusing unsafe members.

    Every member is validated before anything is written, so a refused archive leaves at
    most an empty ``dest``. Raises :class:`UnsafeArchive`.
    """
    archive, root = Path(archive), Path(dest)
    root.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        _extract_zip(archive, root)
    elif tarfile.is_tarfile(archive):
        _extract_tar(archive, root)
    else:
        raise UnsafeArchive("not a zip or tar archive")
    return root


def _extract_zip(archive: Path, root: Path) -> None:
    budget = _Budget()
    with zipfile.ZipFile(archive) as zf:
        plan = []
        declared = 0
        for info in zf.infolist():
            budget.member()
            parts = _member_parts(info.filename)
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode) if mode else 0
            if kind == stat.S_IFLNK:
                link = zf.read(info).decode("utf-8", errors="replace")
                if not _link_inside(parts, link, relative_to_member=True):
                    raise UnsafeArchive(f"symlink {info.filename!r} points outside the target ({link!r})")
                continue  # links are never created
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                raise UnsafeArchive(f"member {info.filename!r} is not a regular file or folder")
            if not parts:
                continue
            declared += info.file_size
            plan.append((info, parts))
        if declared > MAX_TOTAL_BYTES:
            raise UnsafeArchive(f"declares more than {MAX_TOTAL_BYTES} unpacked bytes")
        for info, parts in plan:
            if info.is_dir():
                if not _skipped(parts):
                    _open_dirs(root, parts)
            elif not _skipped(parts):
                with zf.open(info) as source:
                    _copy(source, root, parts, budget)


def _open_dirs(root: Path, parts: tuple[str, ...]) -> None:
    current = root
    for part in parts:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current, 0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafeArchive(f"{'/'.join(parts)}: a path on the way is not a plain folder")


def _extract_tar(archive: Path, root: Path) -> None:
    budget = _Budget()
    with tarfile.open(archive) as tf:
        members = _plan_tar(tf, budget)
        _write_tar(tf, members, root, budget)


def _plan_tar(tf: tarfile.TarFile, budget: _Budget) -> list[tuple[tarfile.TarInfo, tuple[str, ...]]]:
    """The members to write, in archive order, checked before anything touches the disk.

    Every member is vetted (and counted against the budget) first, so that an unsafe
    archive is refused whole rather than half unpacked; links are checked here too."""
    members = []
    declared = 0
    for member in tf:
        budget.member()
        parts = _member_parts(member.name)
        if member.issym():
            if not _link_inside(parts, member.linkname, relative_to_member=True):
                raise UnsafeArchive(f"symlink {member.name!r} points outside the target ({member.linkname!r})")
            continue
        if member.islnk():
            if not _link_inside(parts, member.linkname, relative_to_member=False):
                raise UnsafeArchive(f"hard link {member.name!r} points outside the target ({member.linkname!r})")
            _member_parts(member.linkname)
            members.append((member, parts))
            continue
        if not (member.isreg() or member.isdir()):
            raise UnsafeArchive(f"member {member.name!r} is a device, FIFO or other special file")
        if not parts:
            continue
        declared += member.size
        members.append((member, parts))
    if declared > MAX_TOTAL_BYTES:
        raise UnsafeArchive(f"declares more than {MAX_TOTAL_BYTES} unpacked bytes")
    return members


def _write_tar(
    tf: tarfile.TarFile, members: list[tuple[tarfile.TarInfo, tuple[str, ...]]], root: Path, budget: _Budget
) -> None:
    """Write the vetted ``members`` under ``root``; kept apart from the vetting so that
    nothing is written until the whole archive has passed it."""
    written: set[tuple[str, ...]] = set()
    for member, parts in members:
        if member.isdir():
            if not _skipped(parts):
                _open_dirs(root, parts)
        elif member.islnk():
            # A hard link is written as a copy of an earlier member (never os.link).
            source_parts = _member_parts(member.linkname)
            if source_parts not in written or _skipped(parts):
                continue
            with open(root.joinpath(*source_parts), "rb") as source:
                _copy(source, root, parts, budget)
            written.add(parts)
        elif not _skipped(parts):
            member_file = tf.extractfile(member)
            if member_file is None:
                continue
            with member_file:
                _copy(member_file, root, parts, budget)
            written.add(parts)
