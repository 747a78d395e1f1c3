"""Boundary arithmetic, in one place: capture indices -> boundaries (README, Vocabulary).

A boundary ``b`` names the residual stream after ``b`` decoder layers (0 = embedding output,
L = last layer's output before the final norm). A site that records a layer's *input* turns
capture index ``i`` into ``b = i``; one that records its *output* into ``b = i + 1``. Whether
``b = 0`` and ``b = L`` can be recorded at all is the site's capturability; every boundary in
between is recorded by the loop over the layers.

:func:`layout` is the one place that applies this, for every id source: which boundaries the
indices yield, in the order the states are read back, which ids are dropped and why, how many
slots the draft's fc reads, and the first id whose recording raises. It knows nothing of how
the indices were produced or how a trace words its steps (:mod:`flowtrace.analysis.trace`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from flowtrace.model.facts import ConcatOrder, Point, Word
from flowtrace.model.links import Unmatched


class DropReason(Word):
    """Why an index yields no boundary."""

    NEGATIVE = "negative"  # i < 0: never equals a loop index (ids are not wrapped like Python negatives)
    EMBEDDING = "embedding"  # b = 0 and the site does not record the embedding
    LAST_LAYER = "last_layer"  # b = L and the site does not record the last layer's output
    OUT_OF_RANGE = "out_of_range"  # past the layers
    POST_NORM = "post_norm"  # the post-final-norm state: it fills a slot but is no boundary
    UNWRITTEN = "unwritten"  # a preallocated slot no layer writes: counted, read uninitialised


class RaiseKind(Word):
    """How recording (or reading back) an index raises."""

    FIRST_ITERATION = "first_iteration"  # met at the loop's first iteration with an operand still None
    MISSING_KEY = "missing_key"  # read back by key from a dict keyed by layer that never stored it


@dataclass(frozen=True, slots=True)
class Drop:
    index: int
    boundary: int  # index + the point's offset (may lie outside 0..L)
    reason: DropReason


@dataclass(frozen=True, slots=True)
class Raise:
    index: int
    kind: RaiseKind


@dataclass(frozen=True, slots=True)
class Layout:
    """What a site makes of the indices: ``boundaries`` in read-back order, ``dropped`` in
    index order, ``slots`` the fc inputs (boundaries plus post-final-norm and unwritten slots),
    ``raises`` the first index (in index order) whose recording or read-back raises."""

    boundaries: tuple[int, ...]
    dropped: tuple[Drop, ...]
    slots: int
    raises: Raise | None = None

    @property
    def extra_slots(self) -> int:
        """Slots the fc reads that hold no boundary."""
        return self.slots - len(self.boundaries)


def offset(point: Point) -> int:
    """0 for a site that records a layer's input, 1 for one that records its output."""
    if point == Point.INPUT:
        return 0
    if point == Point.OUTPUT:
        return 1
    raise ValueError(f"a capture point of {point!s} yields no boundary")


def reachable(boundary: int, num_layers: int, *, embedding: bool, last_layer: bool) -> bool:
    """Whether the site records ``boundary``: every boundary between the embedding and the
    last layer's output is met by the loop; those two only when the site records them."""
    if boundary == 0:
        return embedding
    if boundary == num_layers:
        return last_layer
    return 0 < boundary < num_layers


def classify(index: int, boundary: int, num_layers: int) -> DropReason:
    """Why an unrecorded index yields no boundary (negative ids first: a loop never meets them)."""
    if index < 0:
        return DropReason.NEGATIVE
    if boundary == 0:
        return DropReason.EMBEDDING
    if boundary == num_layers:
        return DropReason.LAST_LAYER
    return DropReason.OUT_OF_RANGE


def layout(
    indices: Sequence[int],
    point: Point,
    num_layers: int,
    *,
    embedding: bool,
    last_layer: bool,
    order: ConcatOrder = ConcatOrder.LOOP,
    unmatched: Unmatched = Unmatched.DROPPED,
    post_norm: Collection[int] = (),
    raising_index: int | None = None,
) -> Layout:
    """The boundaries ``indices`` yield at a site recording at ``point``.

    ``order``: ``config`` reads the states back in the order of the indices, duplicates
    repeated; ``loop`` and ``sorted`` once each, ascending. ``unmatched``: what an index no
    layer records does (dropped; a KeyError when read back by key; an unwritten buffer slot).
    ``post_norm``: indices that stand for the post-final-norm state (a slot, no boundary).
    ``raising_index``: the index whose recording raises at the loop's first iteration.
    """
    shift = offset(point)
    found: list[int] = []
    dropped: list[Drop] = []
    extra = 0
    raises: Raise | None = None
    for i in indices:
        b = i + shift
        if raising_index is not None and i == raising_index and raises is None:
            raises = Raise(i, RaiseKind.FIRST_ITERATION)
        if i in post_norm:
            dropped.append(Drop(i, b, DropReason.POST_NORM))
            extra += 1
        elif reachable(b, num_layers, embedding=embedding, last_layer=last_layer):
            found.append(b)
        elif unmatched is Unmatched.RAISES:
            raises = raises or Raise(i, RaiseKind.MISSING_KEY)
        elif unmatched is Unmatched.EMPTY_SLOT:
            dropped.append(Drop(i, b, DropReason.UNWRITTEN))
            extra += 1
        else:
            dropped.append(Drop(i, b, classify(i, b, num_layers)))
    boundaries = tuple(found) if order == ConcatOrder.CONFIG else tuple(sorted(set(found)))
    return Layout(boundaries, tuple(dropped), len(boundaries) + extra, raises)




@dataclass(frozen=True, slots=True)
class Slot:
    """What one recorded state is: the residual stream at ``boundary``, or, on a delta stream
    (a site recording ``hidden_states`` while its layers return the residual apart), what
    layer ``layer_value_of`` returns first — its output without the residual, no boundary at
    all. Exactly one of the two is set (the names match the engine probe's runtime slots)."""

    boundary: int | None
    layer_value_of: int | None = None


def delta_slots(boundaries: Sequence[int]) -> tuple[Slot, ...]:
    """The slots a delta stream fills where the indices name ``boundaries``: before the first
    layer (b = 0) the recorded tensor is the embedding output, the stream itself; at any later
    boundary b it is what layer b - 1 returned first, without the residual it returned apart."""
    return tuple(Slot(0) if b == 0 else Slot(None, b - 1) for b in boundaries)


__all__ = [
    "Drop",
    "DropReason",
    "Layout",
    "Raise",
    "RaiseKind",
    "Slot",
    "classify",
    "delta_slots",
    "layout",
    "offset",
    "reachable",
]
