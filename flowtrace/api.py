"""The plain Python API: what the CLI and the tests call.

Every entry point takes a path and options and returns frozen results; nothing here prints,
exits or reads the environment beyond the options given. The CLI (``cli.py``) is a thin
layer that parses arguments, calls one of these and renders the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from flowtrace.errors import UsageError
from flowtrace.model import facts as F
from flowtrace.index.build import IndexOptions, build_index
from flowtrace.engines.profiles import Conventions, Profile, select_profiles
from flowtrace.analysis.resolve import ModelRow, Project


@dataclass(frozen=True)
class ScanResult:
    root: Path
    profiles: tuple[Profile, ...]
    index: F.IndexResult
    project: Project

    @property
    def rows(self) -> tuple[ModelRow, ...]:
        return self.project.rows

    @property
    def files(self) -> tuple[F.FileFacts, ...]:
        return self.index.files

    @property
    def engine(self) -> str:
        return ",".join(p.name for p in self.profiles)

    @property
    def engine_keys(self) -> tuple[str, ...]:
        """Where the engine reads the draft's layer ids, in the order it tries them."""
        return tuple(dict.fromkeys(k for p in self.profiles for k in p.layer_id_keys))

    @cached_property
    def graph(self):
        """The repo's data-flow graph (built once; rules and the report read it)."""
        from flowtrace.analysis.graph import build_graph

        return build_graph(self.project, self.engine_keys)

    def model(self, name: str):
        row = self.project.row(name)
        if row is None:
            close = sorted(r.name for r in self.rows if name.lower() in r.name.lower())[:8]
            hint = f" (similar: {', '.join(close)})" if close else ""
            raise UsageError(f"no model class or architecture named {name!r} in {self.root}{hint}")
        return row


def resolve_root(path: str | Path) -> Path:
    root = Path(path)
    if not root.exists():
        raise UsageError(f"{path}: no such file or directory")
    return root


def scan(path: str | Path, *, profile: str | None = None, options: IndexOptions | None = None, profile_files: tuple[str | Path, ...] = ()) -> ScanResult:
    """Index a tree and resolve its model matrix (``profile_files``: the user's own profiles,
    merged with the bundled ones)."""
    source = str(path)
    if source.startswith("pypi:"):
        from flowtrace.sources.fetch import fetch_pypi

        root = fetch_pypi(source[5:], cache_dir=(options.cache_dir if options else None))
    else:
        root = resolve_root(path)
    profiles = select_profiles(root, profile, extra=tuple(Path(f) for f in profile_files))
    index = build_index(root, profiles, options)
    project = Project(index.files, Conventions.merge(profiles))
    return ScanResult(root=root, profiles=tuple(profiles), index=index, project=project)


def findings(result: ScanResult, select: tuple[str, ...] = (), ignore: tuple[str, ...] = ()) -> list:
    """Run every rule over a scan (rule selection by code prefix)."""
    from flowtrace.checks.base import all_rules
    from flowtrace.checks.selection import selected_codes

    rules = all_rules()
    enabled = selected_codes([r.code for r in rules], select, ignore)
    out: list = []
    for rule_cls in rules:
        if rule_cls.code in enabled:
            out.extend(rule_cls().check(result))
    return sorted(out, key=lambda f: (f.file, f.line, f.rule, f.fingerprint))


def html_report(result: ScanResult, findings: list, *, link_base: str | None = None, probe: dict | None = None) -> str:
    """The self-contained HTML report for a scan."""
    from flowtrace.render.html import render_html
    from flowtrace.render.report_data import report_document

    return render_html(report_document(result, findings), link_base=link_base, probe=probe)


def trace(result: ScanResult, model: str, layer_ids: list[int] | None, num_layers: int, hidden_size: int | None = None):
    """Which boundaries the engine captures for ``model`` and these ids (None: default)."""
    from flowtrace.analysis.source_trace import trace_model

    if num_layers <= 0:
        raise UsageError("--num-layers must be a positive integer")
    if num_layers > 100_000:  # the boundary sets are materialised; no model has this many layers
        raise UsageError(f"--num-layers {num_layers} is implausible (at most 100000)")
    return trace_model(result.project, result.model(model), layer_ids, num_layers, hidden_size)


def compat(result: ScanResult, target_config: str | Path, draft_config: str | Path, trained_with: str | None = None, trained_boundaries: list[int] | str | None = None):
    """The verdict for one deployment: the draft's training layout against what the engine serves.

    ``trained_boundaries`` (a list or "0,3,31") states the training layout directly and wins
    over ``trained_with``."""
    from flowtrace.analysis.compat import ConfigError, compat as run_compat, parse_boundaries

    try:
        given = parse_boundaries(trained_boundaries) if isinstance(trained_boundaries, str) else trained_boundaries
        return run_compat(result.project, target_config, draft_config, trained_with=trained_with, engine_keys=result.engine_keys, trained_boundaries_given=given)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def diff(old: str | Path, new: str | Path, *, profile: str | None = None, options: IndexOptions | None = None, profile_files: tuple[str | Path, ...] = ()):
    """Capture-support changes from the tree (or ``pypi:`` release) ``old`` to ``new``."""
    from flowtrace.analysis.diff import diff_rows

    before = scan(old, profile=profile, options=options, profile_files=profile_files)
    after = scan(new, profile=profile, options=options, profile_files=profile_files)
    return diff_rows(before.rows, after.rows, frozenset(before.project.classes), frozenset(after.project.classes))
