"""What the trace must serve once a fix is in, and checking it on the patched tree.

A fix is judged by what the draft will receive, not by the finding disappearing alone (a
finding can vanish because the patch broke the chain the rule reads). Each codemod states
expectations as ``(model, ids, L, boundaries)``; :mod:`flowtrace.fix.verify` traces each on
the re-scanned tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowtrace.analysis.trace import trace_row
from flowtrace.checks.targets import conventions
from flowtrace.fix.model import Expectation

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.analysis.trace import TraceResult

PROBE_LAYERS = 32  # the layer count expectations are traced at (any L > the ids used works)
MAX_ROWS = 3  # rows checked per fix: they share the holder, so a few stand for all


def embedding_id(result: ScanResult) -> int:
    value = conventions(result).embedding_id
    return -1 if value is None else value


def site_rows(result: ScanResult, holder: str) -> list[ModelRow]:
    """Rows whose capture chain ends at a site in ``holder``, registered ones first (a class
    the registry cannot name, e.g. defined twice under one module path, is still traced)."""
    rows = []
    for row in result.rows:
        site = row.chain.site if row.chain is not None else None
        if site is not None and site.owner == holder:
            rows.append(row)
    rows.sort(key=lambda r: not r.registered)
    return rows[:MAX_ROWS]


def embedding_expectations(result: ScanResult, holder: str) -> tuple[Expectation, ...]:
    """Asking for the embedding alone serves b = 0, for the rows capturing through ``holder``."""
    ids = (embedding_id(result),)
    return tuple(Expectation(r.qualname, ids, PROBE_LAYERS, (0,)) for r in site_rows(result, holder))


def traced(result: ScanResult, expectation: Expectation) -> TraceResult | None:
    row = result.project.row(expectation.model)
    if row is None:
        return None
    return trace_row(result.project, row, list(expectation.ids), expectation.num_layers, None)


def check(result: ScanResult, expectation: Expectation) -> str | None:
    """None when the patched tree serves the expectation, else what it serves instead."""
    t = traced(result, expectation)
    if t is None:
        return f"{expectation.model} is no longer a model class of the tree"
    outcome = getattr(getattr(t, "outcome", None), "value", None)
    if outcome != "captures" or tuple(t.boundaries or ()) != expectation.boundaries:
        what = f"boundaries {list(t.boundaries)}" if t.boundaries else (getattr(t, "reason", None) or "nothing")
        return (
            f"{expectation.model} with ids {list(expectation.ids)} at L={expectation.num_layers}: {outcome},"
            f" {what} (expected {list(expectation.boundaries)})"
        )
    for phase in getattr(t, "phases", ()) if expectation.every_phase else ():  # graph replay, a weight reload
        if str(phase.outcome) != "captures" or tuple(phase.boundaries or ()) != expectation.boundaries:
            what = f"boundaries {list(phase.boundaries)}" if phase.boundaries else (phase.reason or str(phase.outcome))
            return (
                f"{expectation.model} with ids {list(expectation.ids)} at L={expectation.num_layers}:"
                f" {phase.words} serves {what} (expected {list(expectation.boundaries)})"
            )
    return None
