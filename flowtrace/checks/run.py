"""Run the rules over a scan: the one place that turns a selection into findings."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from flowtrace.checks.base import Finding
    from flowtrace.analysis.scan import ScanResult


def run_rules(result: ScanResult, select: tuple[str, ...] = (), ignore: tuple[str, ...] = ()) -> list[Finding]:
    """Run every rule over a scan (rule selection by code prefix), then grade what they found:
    severity from consequence, nothing unreachable, one finding per root cause."""
    from flowtrace.checks.base import all_rules
    from flowtrace.checks.grading import grade
    from flowtrace.checks.selection import selected_codes

    rules = all_rules()
    enabled = selected_codes([r.code for r in rules], select, ignore)
    out: list[Finding] = []
    for rule_cls in rules:
        if rule_cls.code in enabled:
            out.extend(rule_cls().check(result))
    found = _named(result, grade(result, out))
    return _every_method(result, found, select, ignore) if result.every_method else found


def _every_method(
    result: ScanResult, found: list[Finding], select: tuple[str, ...], ignore: tuple[str, ...]
) -> list[Finding]:
    """``--method all``: the default method's findings, each naming its method by its label as
    every other method's does (its fingerprint unchanged: a baseline of plain scans still
    accepts it), then every other served method's findings (:func:`_named` names them)."""
    chosen = result.method
    if chosen is None:
        return found
    own = [_under(f, chosen.title, chosen.name, f.fingerprint) for f in found]
    return own + [f for other in result.method_results.values() for f in run_rules(other, select, ignore)]


def _named(result: ScanResult, findings: list[Finding]) -> list[Finding]:
    """Under a method other than the default (``--method``), every finding names it first and
    its fingerprint is its own: a baseline taken for one method does not accept another's
    finding at the same line (the default method's findings are as they always were)."""
    from flowtrace.checks.base import fingerprint

    asked, chosen = result.method_asked, result.method
    if asked is None or chosen is None:
        return findings
    return [_under(f, chosen.title, asked, fingerprint(f.rule, f.symbol, f"{f.fingerprint}:{asked}")) for f in findings]


def _under(finding: Finding, title: str, method: str, fingerprint: str) -> Finding:
    """``finding`` as one method's: the method's title before its message (the one place that
    prefix is written), the method it names, and its fingerprint."""
    return dataclasses.replace(finding, message=f"{title}: {finding.message}", method=method, fingerprint=fingerprint)


def finding_order(result: ScanResult) -> Callable[[Finding], tuple[Any, ...]]:
    """The findings' order in every output: by place and rule, then (``--method all``) by method
    as the profiles list them, the default first (a plain scan's findings name no method)."""
    rank = {m.name: i for i, m in enumerate(result.project.conv.methods_served)}
    return lambda f: (f.file, f.line, f.rule, rank.get(f.method or "", -1), f.fingerprint)
