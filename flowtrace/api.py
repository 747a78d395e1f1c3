"""The plain Python API: what the CLI and the tests call.

Every entry point takes a path and options and returns frozen results; nothing here prints,
exits or reads the environment beyond the options given. The CLI (``cli.py``) is a thin
layer that parses arguments, calls one of these and renders the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowtrace.errors import UsageError
from flowtrace.index.build import IndexOptions
from flowtrace.analysis.scan import ScanResult, resolve_root, scan

if TYPE_CHECKING:  # the results' modules load with the entry point that needs them
    from flowtrace.analysis.compat import CompatResult
    from flowtrace.analysis.diff import Change
    from flowtrace.analysis.method_choice import MethodChoice
    from flowtrace.analysis.trace import TraceResult
    from flowtrace.checks.base import Finding

__all__ = [
    "IndexOptions",
    "ScanResult",
    "UsageError",
    "answered_for",
    "compat",
    "compat_draft",
    "draft_method",
    "findings",
    "html_report",
    "resolve_root",
    "scan",
    "trace",
]


def findings(result: ScanResult, select: tuple[str, ...] = (), ignore: tuple[str, ...] = ()) -> list[Finding]:
    """Run every rule over a scan (rule selection by code prefix)."""
    from flowtrace.checks.run import run_rules

    return run_rules(result, select, ignore)


def html_report(
    result: ScanResult, findings: list[Finding], *, link_base: str | None = None, probe: dict[str, Any] | None = None
) -> str:
    """The self-contained HTML report for a scan."""
    from flowtrace.render.html import render_html
    from flowtrace.render.report_data import report_document

    return render_html(report_document(result, findings), link_base=link_base, probe=probe)


def trace(
    result: ScanResult,
    model: str,
    layer_ids: list[int] | None,
    num_layers: int,
    hidden_size: int | None = None,
    target_config: dict[str, Any] | None = None,
    *,
    draft_layers: int | None = None,
) -> TraceResult:
    """Which boundaries the engine captures for ``model`` and these ids (None: default;
    ``draft_layers``: the draft's layer count, for a method whose runner computes its default
    ids from it)."""
    from flowtrace.analysis.method_ids import trace_for_method

    if num_layers <= 0:
        raise UsageError("--num-layers must be a positive integer")
    if num_layers > 100_000:  # the boundary sets are materialised; no model has this many layers
        raise UsageError(f"--num-layers {num_layers} is implausible (at most 100000)")
    return trace_for_method(
        result.project,
        result.model(model),
        layer_ids,
        num_layers,
        hidden_size,
        target_config,
        draft_layers=draft_layers,
    )


def compat(
    result: ScanResult,
    target_config: str | Path,
    draft_config: str | Path,
    trained_with: str | None = None,
    trained_boundaries: list[int] | str | None = None,
) -> CompatResult:
    """The verdict for one deployment: the draft's training layout against what the engine serves.

    ``trained_boundaries`` (a list or "0,3,31") states the training layout directly and wins
    over ``trained_with``."""
    from flowtrace.analysis.compat import compat as run_compat, parse_boundaries
    from flowtrace.sources.configs import ConfigError

    try:
        given = parse_boundaries(trained_boundaries) if isinstance(trained_boundaries, str) else trained_boundaries
        return run_compat(
            result.project,
            target_config,
            draft_config,
            trained_with=trained_with,
            engine_keys=result.engine_keys,
            trained_boundaries_given=given,
        )
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def compat_draft(result: ScanResult, name: str, target_config: str | Path | None = None) -> CompatResult:
    """The verdict for a draft of the catalogue (``result.drafts``, shipped plus --drafts files)
    served by this tree: its ids, convention and target come from the entry."""
    import difflib

    from flowtrace.analysis.compat import catalogue_inputs, verdict
    from flowtrace.sources.configs import ConfigError

    entry = result.drafts.find(name)
    if entry is None:
        close = difflib.get_close_matches(name, [d.name for d in result.drafts.drafts], n=3, cutoff=0.4)
        hint = (
            f" (did you mean {', '.join(close)}?)"
            if close
            else " (`flowtrace compat --help`: docs/drafts.md lists them)"
        )
        raise UsageError(f"--draft {name!r}: no such draft in the catalogue{hint}")
    try:
        return verdict(
            result.project,
            catalogue_inputs(result.project, entry, result.drafts, target_config, result.engine_keys),
            result.engine_keys,
        )
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def draft_method(
    result: ScanResult, draft_config: str | Path | None = None, draft_name: str | None = None
) -> MethodChoice | None:
    """The speculative method a draft is for (``compat`` without ``--method``): a catalogue
    draft's own method, else what its config holds (:mod:`flowtrace.analysis.method_choice`);
    None when it names none the profiles serve."""
    from flowtrace.analysis.method_choice import MethodChoice, draft_method as choose
    from flowtrace.engines.methods import find_method
    from flowtrace.sources.configs import ConfigError, read_config

    served = result.project.conv.methods_served
    if draft_name is not None:
        entry = result.drafts.find(draft_name)
        found = find_method(served, entry.method) if entry is not None else None
        return (
            MethodChoice(found, f"the catalogue entry {entry.name} is a {found.title} draft")
            if found is not None and entry is not None
            else None
        )
    if draft_config is None:
        return None
    try:
        return choose(served, read_config(draft_config, "draft"))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def answered_for(verdict: CompatResult, result: ScanResult, why: str | None) -> CompatResult:
    """The verdict naming the method it answers for, when that is not the profiles' default."""
    import dataclasses

    chosen = result.method
    if result.method_asked is None or chosen is None:
        return verdict
    return dataclasses.replace(verdict, method=chosen.title, method_why=why or "named with --method")


def diff(
    old: str | Path,
    new: str | Path,
    *,
    profile: str | None = None,
    options: IndexOptions | None = None,
    profile_files: tuple[str | Path, ...] = (),
) -> tuple[Change, ...]:
    """Capture-support changes from the tree (or ``pypi:`` release) ``old`` to ``new``; a side
    without engine code is a :class:`UsageError` (a wrong folder is not "every class lost")."""
    from flowtrace.analysis.diff import diff_rows
    from flowtrace.analysis.scan import require_engine_code

    before = scan(old, profile=profile, options=options, profile_files=profile_files)
    require_engine_code(before, old)
    after = scan(new, profile=profile, options=options, profile_files=profile_files)
    require_engine_code(after, new)
    return diff_rows(
        before.rows, after.rows, frozenset(before.project.lookup.classes), frozenset(after.project.lookup.classes)
    )
