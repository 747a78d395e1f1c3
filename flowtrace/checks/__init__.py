"""Rules, one module each, named after the rule (``ft001_wrapper_drops_setter.py``).

Importing this package imports every module in it, found by walking the package, so a new rule
file is registered by being there: no list to extend, no rule silently left out.
``tests/test_rule_discovery.py`` fails when an ``ftNNN_*`` module defines no rule (or another
code's), or when any other module defines one.
"""

from __future__ import annotations

import importlib
import pkgutil


def module_names() -> tuple[str, ...]:
    """The package's modules (full dotted names), sorted: what discovery imports."""
    return tuple(sorted(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.ispkg))


def load_rule_modules() -> None:
    """Import every module of the package; each rule class registers itself on definition."""
    for name in module_names():
        importlib.import_module(name)


load_rule_modules()
