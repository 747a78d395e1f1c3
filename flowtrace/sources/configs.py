"""Model config files (a target's or a draft's ``config.json``): the one reader every stage uses.

compat, ``compat --fix`` (which rewrites a draft config and needs its text as well) and the
runtime probe read the same files; they read them here, once, with the same limits: a folder
means its ``config.json``, only a regular file of bounded size is opened (a symlink to a
device or FIFO must not hang the reader), and anything that is not a JSON object is one
:class:`ConfigError` line naming the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowtrace.errors import UsageError
from flowtrace.sources.checkpoint import CheckpointError, read_regular_file

MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a config.json is a few KB; a huge one is not a config
CONFIG_FILE = "config.json"


class ConfigError(UsageError):
    """An unusable config file: one line naming the file and the problem (exit 2)."""


@dataclass(frozen=True, slots=True)
class ConfigDocument:
    """A config file as read: where it is, its text (kept for rewriting) and its object."""

    path: Path
    text: str
    data: dict[str, Any] = field(default_factory=dict)


def config_path(path: str | os.PathLike[str]) -> Path:
    """A folder's ``config.json``, or the file itself."""
    p = Path(path)
    return p / CONFIG_FILE if p.is_dir() else p


def read_document(path: str | os.PathLike[str], role: str) -> ConfigDocument:
    """The config at ``path`` (a file or a folder holding ``config.json``); ``role`` names it in
    errors ("target", "draft")."""
    p = config_path(path)
    if not p.exists() and not p.is_symlink():
        raise ConfigError(f"{p}: {role} config not found")
    try:
        text = read_regular_file(p, MAX_CONFIG_BYTES).decode("utf-8")
    except CheckpointError as exc:
        raise ConfigError(f"cannot read the {role} config: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: cannot read the {role} config ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: the {role} config is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise ConfigError(f"{p}: the {role} config is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the {role} config must be a JSON object")
    return ConfigDocument(p, text, data)


def read_config(path: str | os.PathLike[str], role: str) -> dict[str, Any]:
    """The config object at ``path`` (see :func:`read_document`)."""
    return read_document(path, role).data


def lookup(data: dict[str, Any], dotted: str) -> Any:
    """``data["a"]["b"]`` for ``"a.b"``; None when any part is missing."""
    current: object = data
    for part in dotted.split("."):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current


__all__ = [
    "CONFIG_FILE",
    "MAX_CONFIG_BYTES",
    "ConfigDocument",
    "ConfigError",
    "config_path",
    "lookup",
    "read_config",
    "read_document",
]
