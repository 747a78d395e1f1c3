"""Capture-site shapes, one module each, found by walking this package.

A shape module defines ``SHAPE``, an instance of :class:`flowtrace.index.sites.base.SiteShape`
(its mechanism, where its point is decided, VALID / INVALID example loops, and ``find()``
over a frozen :class:`flowtrace.index.sites.context.LoopContext`). Adding a shape is one
new module here (plus a :class:`flowtrace.model.facts.Mechanism` member when it records in a
new way): the walk finds it, and ``tests/test_site_shapes.py`` fails for a module without
``SHAPE`` and runs its examples.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from flowtrace.index.sites.base import Found, PointDecision, SiteShape
from flowtrace.index.sites.context import LoopContext
from flowtrace.model import facts as F

# The modules every shape builds on; every other module of the package is a shape.
INFRASTRUCTURE = frozenset({"base", "context"})


def shape_modules() -> tuple[str, ...]:
    """The names of the package's shape modules, sorted."""
    return tuple(
        sorted(
            m.name
            for m in pkgutil.iter_modules(__path__)
            if m.name not in INFRASTRUCTURE and not m.name.startswith("_")
        )
    )


@functools.cache
def registered() -> tuple[SiteShape, ...]:
    """Every shape, in the order their sites are listed within one loop (rank, then name)."""
    shapes = []
    for name in shape_modules():
        module = importlib.import_module(f"{__name__}.{name}")
        shape = getattr(module, "SHAPE", None)
        if not isinstance(shape, SiteShape):
            raise TypeError(f"{module.__name__} defines no SHAPE (a SiteShape instance)")
        shapes.append(shape)
    return tuple(sorted(shapes, key=lambda s: (s.rank, s.name)))


def captures(ctx: LoopContext) -> list[F.CaptureSiteFact]:
    """The sites of every registered shape in one layer loop: ordered by the shapes' rank,
    then by the call each was found at (shapes of one rank read the same calls)."""
    found: list[tuple[int, int, F.CaptureSiteFact]] = []
    for shape in registered():
        found += [(shape.rank, f.anchor, f.fact) for f in shape.find(ctx)]
    found.sort(key=lambda item: (item[0], item[1]))  # stable: a shape's own order within a call
    return [fact for _, _, fact in found]


def point_decision(site: F.CaptureSiteFact) -> PointDecision:
    """Where a site's point is decided, asked of the first shape (by rank) that records with
    the site's mechanism; in the loop when none does."""
    for shape in registered():
        if site.mechanism in shape.mechanisms:
            return shape.decision(site)
    return PointDecision.IN_LOOP


__all__ = ["Found", "PointDecision", "SiteShape", "captures", "point_decision", "registered", "shape_modules"]
