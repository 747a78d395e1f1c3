"""``[tool.flowtrace]``: the scanned tree's own settings for ``flowtrace check``.

The table lives in the nearest ``pyproject.toml`` that has one, searched upward from the
scanned root (the folder given, or the folder holding the file given) like ruff does, so a
scan of a subfolder applies the repository's settings. The search stops at a repository
boundary (a folder holding ``.git``), so an engine downloaded into some folder never picks up
an unrelated project's settings from above it. ``--config FILE`` names another file (its
``[tool.flowtrace]`` table, or, in a file of flowtrace's own such as ``flowtrace.toml``, the
same keys at the top level) and ``--isolated`` ignores configuration altogether.

Keys, spelled as in ruff::

    [tool.flowtrace]
    select = ["FT"]                    # code prefixes to enable (default: every rule)
    extend-select = ["FT016"]          # added to select
    ignore = ["FT010"]                 # code prefixes to disable
    per-file-ignores = { "tests/**" = ["FT001"] }   # gitignore-style pattern -> prefixes
    exclude = ["third_party/"]         # gitignore-style patterns, added to --exclude
    fail-on = "warning"                # error | warning | info
    profile = "sglang"                 # force an engine profile
    profile-files = ["ci/myengine.toml"]   # the project's own engine profiles (relative to this file)
    drafts = ["ci/our-drafts.toml"]    # the project's own draft catalogue files (docs/drafts.md), relative to this file

Any problem (bad TOML, a table that is not a table, an unknown key, a wrong type, an unknown
rule code) is a :class:`ConfigError`: one line naming the file and the key, exit code 2.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from flowtrace.errors import UsageError
from flowtrace.checks.base import SEVERITIES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

class ConfigError(UsageError):
    """A malformed ``[tool.flowtrace]`` table (or a bad selector on the command line)."""


@dataclass(frozen=True)
class Config:
    path: Path | None = None  # the file read, None when there was none
    select: tuple[str, ...] | None = None  # None: not set (every rule)
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())
    exclude: tuple[str, ...] = ()
    fail_on: str | None = None
    profile: str | None = None
    profile_files: tuple[Path, ...] = ()
    drafts: tuple[Path, ...] = ()


def rule_codes() -> tuple[str, ...]:
    """Every rule code, sorted: the rule modules' (by their names, without importing them: the
    selection is checked before the index, whose workers should not wait on the rules' imports)
    and any rule registered from elsewhere."""
    from flowtrace.checks import module_codes
    from flowtrace.checks.base import Rule

    return tuple(sorted(set(module_codes()) | set(Rule.registry)))


def normalise_selector(value: str) -> str:
    return value.strip().upper()


def check_selector(selector: str, codes: tuple[str, ...]) -> str | None:
    """None when ``selector`` names at least one rule (a code, a prefix such as ``FT0``, or ALL)."""
    if selector == "ALL" or any(c.startswith(selector) for c in codes):
        return None
    if not selector:
        return "empty rule code"
    return f"unknown rule code {selector!r} (valid: {', '.join(codes)})"


def parse_selectors(
    values: tuple[str, ...] | list[str], *, where: str, codes: tuple[str, ...] | None = None
) -> tuple[str, ...]:
    """Split comma-separated, repeatable CLI values into validated, upper-case prefixes."""
    codes = codes if codes is not None else rule_codes()
    out: list[str] = []
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            sel = normalise_selector(part)
            problem = check_selector(sel, codes)
            if problem:
                raise ConfigError(f"{where}: {problem}")
            out.append(sel)
    return tuple(dict.fromkeys(out))


def config_file_for(root: Path) -> Path:
    """The pyproject.toml whose ``[tool.flowtrace]`` applies to ``root``: the nearest one that
    has the table, from the root upward, not above the repository the root lies in; else the
    root's own pyproject.toml path (which may not exist)."""
    start = (root if root.is_dir() else root.parent).resolve()
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _has_table(candidate):
            return candidate
        if (folder / ".git").exists():
            break
    return start / "pyproject.toml"


def _has_table(path: Path) -> bool:
    """Whether the file declares ``[tool.flowtrace]`` (a cheap text test; parsing comes later)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "tool.flowtrace" in text or ("[tool]" in text and "flowtrace" in text)


def load_config(root: Path, explicit: str | Path | None = None) -> Config:
    """Read ``[tool.flowtrace]`` from ``explicit`` or from the nearest ``pyproject.toml``."""
    path = Path(explicit) if explicit is not None else config_file_for(root)
    if explicit is None and not path.is_file():
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: [tool] must be a table, got {_type(tool)}")
    if "flowtrace" in tool:
        return parse_table(tool["flowtrace"], path)
    if explicit is not None:
        return _explicit_top_level(data, path)
    return Config(path=path)


def _explicit_top_level(data: dict[str, Any], path: Path) -> Config:
    """A file named with ``--config`` and no ``[tool.flowtrace]``: its top-level keys are the
    settings (a ``flowtrace.toml``); a pyproject.toml without the table is an error, never a
    silently empty configuration."""
    own = {k: v for k, v in data.items() if k != "tool"}
    if path.name == "pyproject.toml" or not own:
        raise ConfigError(f"{path}: no [tool.flowtrace] table (and no top-level flowtrace keys: {', '.join(KEYS)})")
    return parse_table(own, path)


def _type(value: Any) -> str:
    return {
        str: "a string",
        int: "an integer",
        float: "a float",
        bool: "a boolean",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)


@dataclass(frozen=True, slots=True)
class _Table:
    """The ``[tool.flowtrace]`` table being read, with what every key reader needs."""

    values: dict[str, Any]
    path: Path
    where: str
    codes: tuple[str, ...]

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.values[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{self.where} {key}: expected an array of strings, got {_type(value)}")
        return tuple(value)

    def selectors(self, key: str, values: tuple[str, ...]) -> tuple[str, ...]:
        out = []
        for v in values:
            sel = normalise_selector(v)
            problem = check_selector(sel, self.codes)
            if problem:
                raise ConfigError(f"{self.where} {key}: {problem}")
            out.append(sel)
        return tuple(out)

    def patterns(self, key: str, values: Iterable[str]) -> None:
        from flowtrace.sources.discover import _pattern_problem

        for v in values:
            problem = _pattern_problem(v)
            if problem:
                raise ConfigError(f"{self.where} {key}: pattern {v!r}: {problem}")


def _read_selectors(t: _Table, key: str) -> tuple[str, ...]:
    return t.selectors(key, t.strings(key))


def _read_exclude(t: _Table, key: str) -> tuple[str, ...]:
    values = t.strings(key)
    t.patterns(key, values)
    return values


def _read_per_file_ignores(t: _Table, key: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    pfi = t.values[key]
    if not isinstance(pfi, dict):
        raise ConfigError(f"{t.where} per-file-ignores: expected a table of pattern = [codes], got {_type(pfi)}")
    t.patterns(key, pfi)
    entries = []
    for pattern, value in pfi.items():
        where = f'per-file-ignores."{pattern}"'
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{t.where} {where}: expected an array of rule codes, got {_type(value)}")
        entries.append((pattern, t.selectors(where, tuple(value))))
    return tuple(entries)


def _read_fail_on(t: _Table, key: str) -> str:
    value = t.values[key]
    if value not in SEVERITIES:
        shown = repr(value) if isinstance(value, str) else _type(value)
        raise ConfigError(f"{t.where} fail-on: expected one of {', '.join(SEVERITIES)}, got {shown}")
    return str(value)


def _read_profile_files(t: _Table, key: str) -> tuple[Path, ...]:
    from flowtrace.engines.profiles import load_profile

    files = tuple(t.path.parent / f for f in t.strings(key))
    for f in files:
        load_profile(f)  # a bad profile is reported against its own file and key
    return files


def _read_drafts(t: _Table, key: str) -> tuple[Path, ...]:
    from flowtrace.engines.drafts import load_catalogue
    from flowtrace.errors import ProfileError

    files = tuple(t.path.parent / f for f in t.strings(key))
    try:
        load_catalogue(files)  # a bad entry is reported against its own file and entry
    except ProfileError as exc:
        raise ConfigError(f"{t.where} drafts: {exc}") from None
    return files


def _read_profile(t: _Table, key: str) -> str:
    from flowtrace.engines.profiles import available_profiles, load_profile
    from flowtrace.errors import ProfileError

    value = t.values[key]
    if not isinstance(value, str):
        raise ConfigError(f"{t.where} profile: expected a string, got {_type(value)}")
    try:
        user = t.strings("profile-files") if "profile-files" in t.values else ()
        names = tuple(available_profiles()) + tuple(load_profile(t.path.parent / f).name for f in user)
    except ProfileError:
        names = ()
    if names and value not in names:
        raise ConfigError(f"{t.where} profile: unknown profile {value!r} (available: {', '.join(names)})")
    return value


# One declaration per key: its TOML name, the Config field it fills and its reader, in the
# order they are listed and checked (a user profile's name is a valid profile: the profile
# reader reads profile-files itself).
_READERS: tuple[tuple[str, str, Callable[[_Table, str], Any]], ...] = (
    ("select", "select", _read_selectors),
    ("extend-select", "extend_select", _read_selectors),
    ("ignore", "ignore", _read_selectors),
    ("per-file-ignores", "per_file_ignores", _read_per_file_ignores),
    ("exclude", "exclude", _read_exclude),
    ("fail-on", "fail_on", _read_fail_on),
    ("profile", "profile", _read_profile),
    ("profile-files", "profile_files", _read_profile_files),
    ("drafts", "drafts", _read_drafts),
)
KEYS = tuple(key for key, _, _ in _READERS)


def parse_table(table: Any, path: Path) -> Config:
    where = f"{path}: [tool.flowtrace]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table, got {_type(table)}")
    for key in table:
        if key not in KEYS:
            close = difflib.get_close_matches(key.replace("_", "-"), KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(KEYS)})"
            raise ConfigError(f"{where}: unknown key {key!r}{hint}")
    t = _Table(table, path, where, rule_codes())
    read = {name: reader(t, key) for key, name, reader in _READERS if key in table}
    return Config(path=path, **read)


def settings_text(path: str, explicit: str | Path | None, isolated: bool, profile: str | None) -> str:
    """``--show-settings``: the configuration file and the values that apply to ``path``."""
    source = str(path)
    if isolated:
        cfg, origin = Config(), "none (--isolated)"
    elif source.startswith("pypi:") and explicit is None:
        cfg, origin = Config(), "none (a pypi: release has no configuration of its own)"
    else:
        cfg = load_config(Path(".") if source.startswith("pypi:") else Path(source), explicit)
        origin = (
            str(cfg.path)
            if cfg.path is not None
            else "none found (no pyproject.toml with [tool.flowtrace] from PATH up to the repository root)"
        )
    forced = profile or cfg.profile
    detected = "detected from the tree (every profile when none is recognised)"
    lines = [
        f"path: {path}",
        f"config file: {origin}",
        f"select: {', '.join(cfg.select) if cfg.select is not None else 'ALL (every rule)'}",
        f"extend-select: {', '.join(cfg.extend_select) or '-'}",
        f"ignore: {', '.join(cfg.ignore) or '-'}",
        f"per-file-ignores: {'; '.join(f'{p} = {list(c)}' for p, c in cfg.per_file_ignores) or '-'}",
        f"exclude: {', '.join(cfg.exclude) or '-'}",
        f"fail-on: {cfg.fail_on or 'warning (default)'}",
        f"profile: {forced + (' (--profile)' if profile else ' (config)') if forced else detected}",
        f"profile-files: {', '.join(map(str, cfg.profile_files)) or '-'}",
        f"drafts: {', '.join(map(str, cfg.drafts)) or '- (the shipped catalogue only)'}",
    ]
    return "\n".join(lines) + "\n"
