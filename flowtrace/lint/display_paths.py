"""Paths as findings show them: relative to the working folder when the scanned tree is inside it.

Shared by the lint runner (which reads suppression comments through :func:`read_source`) and
every renderer; it lives with the runner, below the renderers, so the runner never imports
a renderer.
"""

from __future__ import annotations

import os
from pathlib import Path


def root_dir(root: Path) -> Path:
    return root if root.is_dir() else root.parent


def read_source(root: Path, file: str) -> str | None:
    from flowtrace.index.syntax import decode

    base = root_dir(root)
    path = base / file
    try:
        if not path.resolve().is_relative_to(base.resolve()) or not path.is_file():
            return None
        return decode(path.read_bytes())
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a symlink loop (Path.resolve, 3.11)
        return None


def display_base(root: Path, cwd: Path | None = None) -> Path:
    """The folder output paths are relative to: the working folder when the scanned tree is
    inside it (so CI annotations and SARIF resolve against the repository), else the root."""
    base = root_dir(root).resolve()
    here = (cwd or Path.cwd()).resolve()
    return here if base.is_relative_to(here) else base


def display_path(root: Path, file: str, cwd: Path | None = None) -> str:
    """``file`` (relative to the scanned root) relative to :func:`display_base`, POSIX."""
    absolute = root_dir(root).resolve() / file
    try:
        return Path(os.path.relpath(absolute, display_base(root, cwd))).as_posix()
    except ValueError:  # another drive on Windows
        return Path(file).as_posix()
