"""Rules, one module each, named after the rule (``ft001_wrapper_drops_setter.py``).

:func:`load_rule_modules` (which ``checks.base.all_rules`` calls) imports every module in the
package, found by walking it, so a new rule file is registered by being there: no list to
extend, no rule silently left out. ``tests/test_rule_discovery.py`` fails when an ``ftNNN_*``
module defines no rule (or another code's), or when any other module defines one; so a rule's
code is also its module's name (:func:`module_codes`), and a selection can be checked before a
single rule is imported. Nothing is imported at package import: a cold scan imports the rules
(and the analyses they pull in) while its workers parse, and a warm one, whose findings come
from the memo, not at all.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator

_RULE_MODULE = re.compile(r"ft(\d{3})_[a-z0-9_]+")


def module_names() -> tuple[str, ...]:
    """The package's modules (full dotted names), sorted: what discovery imports."""
    return tuple(sorted(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.ispkg))


def module_codes() -> tuple[str, ...]:
    """The code of each rule module (``ft001_wrapper_drops_setter`` defines FT001), sorted."""
    found = (_RULE_MODULE.fullmatch(name.rsplit(".", 1)[1]) for name in module_names())
    return tuple(sorted(f"FT{match.group(1)}" for match in found if match is not None))


def load_rule_modules() -> None:
    """Import every module of the package; each rule class registers itself on definition."""
    for _ in rule_module_loads():
        pass


def rule_module_loads() -> Iterator[str]:
    """:func:`load_rule_modules` a module at a time (each name once it is imported): a cold
    scan's index runs it between hand-overs of files to its workers."""
    for name in module_names():
        importlib.import_module(name)
        yield name
