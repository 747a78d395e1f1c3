"""Which rules have a codemod: lazy ``"module:function"`` references, resolved on use.

A rule names its codemod in its ``autofix`` class attribute (a string, so importing the rules
never imports libcst), next to its examples.
"""

from __future__ import annotations

import importlib
from typing import Callable

def reference(code: str) -> str | None:
    """The codemod reference a rule declares (``autofix``), or None."""
    from flowtrace.checks.base import Rule, all_rules

    all_rules()  # registers every rule
    rule = Rule.registry.get(code)
    return rule.autofix if rule is not None else None


def fixable(code: str) -> bool:
    return reference(code) is not None


def codemod(code: str) -> Callable | None:
    ref = reference(code)
    if ref is None:
        return None
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)
