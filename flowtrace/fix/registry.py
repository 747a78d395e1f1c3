"""Which rules have a codemod: lazy ``"module:function"`` references, resolved on use.

A rule names its codemod in its ``autofix`` class attribute (a string, so importing the rules
never imports libcst); :data:`CODEMODS` holds the references for rules that do not name one
themselves.
"""

from __future__ import annotations

import importlib
from typing import Callable

CODEMODS: dict[str, str] = {
    "FT001": "flowtrace.fix.codemods.wrapper_methods:plan",
    "FT009": "flowtrace.fix.codemods.embedding_capture:plan",
    "FT022": "flowtrace.fix.codemods.guard_residual:plan",
}


def reference(code: str) -> str | None:
    """The codemod reference for a rule code: the rule's own ``autofix``, else :data:`CODEMODS`."""
    from flowtrace.checks.base import Rule

    rule = Rule.registry.get(code)
    return getattr(rule, "autofix", None) or CODEMODS.get(code)


def fixable(code: str) -> bool:
    from flowtrace.checks.base import all_rules

    all_rules()  # registers every rule
    return reference(code) is not None


def codemod(code: str) -> Callable | None:
    ref = reference(code)
    if ref is None:
        return None
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)
