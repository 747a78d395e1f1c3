"""Which rules have a codemod: lazy ``"module:function"`` references, resolved on use.

A rule names its codemod in its ``autofix`` class attribute (a string, so importing the rules
never imports libcst), next to its examples.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.checks.base import Finding
    from flowtrace.fix.model import Proposal
    from flowtrace.fix.source import Sources


class Codemod(Protocol):
    """A rule's codemod (``plan`` in :mod:`flowtrace.fix.codemods`): one finding's patch, planned
    against the tree as ``sources`` holds it, or :class:`flowtrace.fix.model.CannotFix`."""

    def __call__(self, result: ScanResult, finding: Finding, sources: Sources, /) -> Proposal: ...


def reference(code: str) -> str | None:
    """The codemod reference a rule declares (``autofix``), or None."""
    from flowtrace.checks.base import Rule, all_rules

    all_rules()  # registers every rule
    rule = Rule.registry.get(code)
    return rule.autofix if rule is not None else None


def fixable(code: str) -> bool:
    return reference(code) is not None


def codemod(code: str) -> Codemod | None:
    ref = reference(code)
    if ref is None:
        return None
    module, _, name = ref.partition(":")
    plan: Codemod = getattr(importlib.import_module(module), name)  # the reference names a plan function
    return plan
