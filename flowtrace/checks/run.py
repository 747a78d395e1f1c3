"""Run the rules over a scan: the one place that turns a selection into findings."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult


def run_rules(result: ScanResult, select: tuple[str, ...] = (), ignore: tuple[str, ...] = ()) -> list:
    """Run every rule over a scan (rule selection by code prefix), then grade what they found:
    severity from consequence, nothing unreachable, one finding per root cause."""
    from flowtrace.checks.base import all_rules
    from flowtrace.checks.grading import grade
    from flowtrace.checks.selection import selected_codes

    rules = all_rules()
    enabled = selected_codes([r.code for r in rules], select, ignore)
    out: list = []
    for rule_cls in rules:
        if rule_cls.code in enabled:
            out.extend(rule_cls().check(result))
    return grade(result, out)
