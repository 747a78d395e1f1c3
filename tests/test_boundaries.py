"""The boundary arithmetic (flowtrace.analysis.boundaries), against the convention table of
the design notes (section 2), written by hand:

- a site recording a layer's *input* turns capture index i into b = i;
- one recording its *output* (after the layer runs, or a hook after its MLP) into b = i + 1;
- b = 0 (the embedding) and b = L (the last layer's output) only when the site records them;
- a serving-config hook engine (ids sorted; -1 is the post-final-norm state): b = i + 1, the
  post-norm id fills a slot but is no boundary, and b = 0 cannot be requested.
"""

import pytest

from flowtrace.analysis.boundaries import Drop, DropReason, Raise, RaiseKind, layout, offset, reachable
from flowtrace.model.facts import ConcatOrder, Point
from flowtrace.model.links import Unmatched

L = 32


def test_input_point_yields_b_equal_to_the_index():
    got = layout([0, 2, 31], Point.INPUT, L, embedding=True, last_layer=False)
    assert got.boundaries == (0, 2, 31) and got.dropped == () and got.slots == 3 and got.raises is None


def test_output_point_yields_the_next_boundary():
    # "capture after layer i runs": b = i + 1, so id L - 1 is the last layer's output b = L
    got = layout([0, 15, 31], Point.OUTPUT, L, embedding=False, last_layer=True)
    assert got.boundaries == (1, 16, 32)


def test_the_embedding_needs_a_site_that_records_it():
    got = layout([0, 5], Point.INPUT, L, embedding=False, last_layer=False)
    assert got.boundaries == (5,)
    assert got.dropped == (Drop(0, 0, DropReason.EMBEDDING),)
    assert got.slots == 1


def test_the_last_layer_needs_a_site_that_records_it():
    # a loop that records layer inputs sees 0..L-1: index L is b = L, the last layer's output
    assert layout([L], Point.INPUT, L, embedding=True, last_layer=False).dropped == (Drop(L, L, DropReason.LAST_LAYER),)
    assert layout([L], Point.INPUT, L, embedding=True, last_layer=True).boundaries == (L,)


def test_negative_and_out_of_range_ids_are_dropped_with_their_reason():
    got = layout([-1, 40], Point.INPUT, L, embedding=True, last_layer=False)
    assert got.boundaries == ()
    assert got.dropped == (Drop(-1, -1, DropReason.NEGATIVE), Drop(40, 40, DropReason.OUT_OF_RANGE))
    # at an output point id -1 names b = 0: recorded only by a site that records the embedding
    # (a capture before its loop); the loop itself never meets a negative index
    assert layout([-1], Point.OUTPUT, L, embedding=False, last_layer=True).dropped == (
        Drop(-1, 0, DropReason.NEGATIVE),
    )
    assert layout([-1], Point.OUTPUT, L, embedding=True, last_layer=True).boundaries == (0,)


def test_read_back_order():
    ids = [10, 3, 10]
    assert layout(ids, Point.INPUT, L, embedding=False, last_layer=False, order=ConcatOrder.CONFIG).boundaries == (
        10,
        3,
        10,
    )
    assert layout(ids, Point.INPUT, L, embedding=False, last_layer=False, order=ConcatOrder.LOOP).boundaries == (3, 10)
    assert layout(ids, Point.INPUT, L, embedding=False, last_layer=False, order=ConcatOrder.SORTED).boundaries == (
        3,
        10,
    )


def test_serving_config_hook_ids():
    # hook after layer i's MLP, ids sorted: {30, -1, 2} -> (-1, 2, 30): -1 is the post-final-norm
    # state (a slot, no boundary), 2 -> b=3, 30 -> b=31; 40 matches no layer: an unwritten slot
    got = layout(
        [-1, 2, 30, 40], Point.OUTPUT, L, embedding=False, last_layer=True,
        order=ConcatOrder.SORTED, unmatched=Unmatched.EMPTY_SLOT, post_norm=(-1,),
    )
    assert got.boundaries == (3, 31)
    assert got.dropped == (Drop(-1, 0, DropReason.POST_NORM), Drop(40, 41, DropReason.UNWRITTEN))
    assert (got.slots, got.extra_slots) == (4, 2)


def test_a_dict_keyed_by_layer_raises_for_an_id_never_stored():
    got = layout(
        [3, 40, 5],
        Point.INPUT,
        L,
        embedding=True,
        last_layer=False,
        order=ConcatOrder.CONFIG,
        unmatched=Unmatched.RAISES,
    )
    assert got.raises == Raise(40, RaiseKind.MISSING_KEY)


def test_the_first_raising_index_in_id_order_wins():
    assert layout([1, 0], Point.INPUT, L, embedding=True, last_layer=False, raising_index=0).raises == Raise(
        0, RaiseKind.FIRST_ITERATION
    )
    both = layout(
        [40, 0], Point.INPUT, L, embedding=True, last_layer=False, unmatched=Unmatched.RAISES, raising_index=0
    )
    assert both.raises == Raise(40, RaiseKind.MISSING_KEY)
    assert layout([1, 2], Point.INPUT, L, embedding=True, last_layer=False, raising_index=0).raises is None


def test_points_and_reach():
    assert (offset(Point.INPUT), offset(Point.OUTPUT)) == (0, 1)
    with pytest.raises(ValueError):
        offset(Point.UNKNOWN)
    assert [reachable(b, L, embedding=False, last_layer=False) for b in (-1, 0, 1, 31, 32, 33)] == [
        False,
        False,
        True,
        True,
        False,
        False,
    ]
    assert [reachable(b, L, embedding=True, last_layer=True) for b in (0, 32)] == [True, True]
