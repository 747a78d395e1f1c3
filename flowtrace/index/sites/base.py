"""What every capture-site shape is: a registered unit with its mechanism, where its point
is decided, example loops, and a ``find()`` over one layer loop's frozen context.

A shape module defines ``SHAPE``, an instance of a :class:`SiteShape` subclass;
:mod:`flowtrace.index.sites` finds it by walking the package. The capture point follows
from two numbers: the boundary the recorded stream sits at (loop index, plus one when
recorded after the layer call) and the label checked against the capture attribute. Equal
means ``input``; one more means ``output`` (:func:`point_for`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from flowtrace.index.sites.context import LoopContext
from flowtrace.model import facts as F


class PointDecision(F.Word):
    """Where a shape's capture point is decided."""

    IN_LOOP = "in_loop"  # the side of the layer call and the tested label, read in the loop
    LAYER_FORWARD = "layer_forward"  # a callback or flag followed into the layer's forward
    HOOK_CALL = "hook_call"  # where the layer's forward calls the object it is handed


@dataclass(frozen=True, slots=True)
class Found:
    """A site a shape found, with its rank among the sites of one loop: ``anchor`` is the
    position of the call it was found at among the loop's calls (0 for a shape that reads
    the loop as a whole), so shapes that read the same calls keep the calls' order."""

    anchor: int
    fact: F.CaptureSiteFact


class SiteShape(ABC):
    """One capture-site shape. Subclasses set the class attributes and implement ``find``.

    ``VALID`` snippets are forwards in which the shape finds exactly the sites listed with
    them (mechanism, point); ``INVALID`` snippets are near misses in which it finds none.
    Both run in ``tests/test_site_shapes.py``."""

    name: ClassVar[str]
    mechanisms: ClassVar[tuple[F.Mechanism, ...]]  # what its facts may say, the first being its own
    rank: ClassVar[int]  # order of the shapes' sites within one loop (ties: by anchor)
    summary: ClassVar[str]
    VALID: ClassVar[tuple[tuple[str, tuple[tuple[F.Mechanism, F.Point], ...]], ...]]
    INVALID: ClassVar[tuple[str, ...]]

    @abstractmethod
    def find(self, ctx: LoopContext) -> list[Found]:
        """The sites of this shape in one layer loop."""

    def decision(self, site: F.CaptureSiteFact) -> PointDecision:
        """Where the point of one of this shape's sites is decided (most: in the loop)."""
        return PointDecision.IN_LOOP


__all__ = ["Found", "PointDecision", "SiteShape"]
