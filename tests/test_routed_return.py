"""FT020 follows the return path through ``super().forward()`` and a helper-routed wrapper.

Expected values are written from reading tests/fixtures/engines/shapes_like/sglang/srt/models/routed_return.py:
both bases return ``(hidden_states, batch)`` early on a busy batch; RoutedCutModel's forward
keeps one element of that tuple, so RoutedCutForCausalLM's unpacking of ``(hidden, aux)`` from
what ``routed_embed`` hands back raises (crash_serving); RoutedKeptModel returns the tuple whole,
which the wrapper unpacks without complaint (silent_wrong)."""

from __future__ import annotations

import pytest

from fixture_paths import FIXTURES
from flowtrace import api
from flowtrace.index.build import IndexOptions
from flowtrace.model import facts as F

SHAPES_LIKE = FIXTURES / "shapes_like"
FILE = "sglang/srt/models/routed_return.py"


@pytest.fixture(scope="module")
def scan():
    return api.scan(SHAPES_LIKE, options=IndexOptions(use_cache=False, jobs=1))


def _lines(text: str) -> list[int]:
    source = (SHAPES_LIKE / FILE).read_text().splitlines()
    return [n for n, line in enumerate(source, 1) if line.strip() == text]


def _ft020(scan) -> dict[str, object]:
    return {f.symbol.rsplit(".", 1)[-1]: f for f in api.findings(scan) if f.rule == "FT020" and f.file == FILE}


def test_a_tuple_cut_to_one_element_by_a_subclass_crashes_at_the_routed_unpacking(scan):
    early, _ = _lines("return hidden_states, batch")
    cut = _lines("return hidden_states")[1]  # the base's emptiness return is the first
    unpack = _lines("hidden_states, aux = hidden_states")[0]
    f = _ft020(scan)["RoutedModel"]
    assert (f.line, f.consequence) == (early, "crash_serving")
    assert [(loc.line, label) for loc, label in zip(f.flow, f.flow_labels)][1:] == [
        (early, "return without the aux states"),
        (cut, "subclass that returns one element of it"),
        (unpack, "caller that unpacks (hidden, aux)"),
    ]
    assert (
        "RoutedCutModel.forward returns one element" in f.effect and "RoutedCutForCausalLM.forward unpacks" in f.effect
    )


def test_the_twin_that_keeps_the_tuple_stays_silent_wrong(scan):
    _, early = _lines("return hidden_states, batch")
    f = _ft020(scan)["RoutedTwinModel"]
    assert (f.line, f.consequence) == (early, "silent_wrong")
    assert "subclass that returns one element of it" not in f.flow_labels


def test_the_index_records_the_super_and_helper_routes(scan):
    uses = {
        (q.rsplit(".", 1)[-1], u.attribute, u.kind, u.via)
        for q, us in scan.project.lookup.output_uses.items()
        for u in us
    }
    assert ("RoutedCutModel", "forward", F.OutputUseKind.DROP, "super()") in uses
    assert ("RoutedCutModel", "forward", F.OutputUseKind.UNPACK, "super()") in uses
    assert ("RoutedKeptModel", "forward", F.OutputUseKind.DROP, "super()") not in uses
    # the helper is handed two attributes: both are recorded, the reader keeps the one that is a module
    assert ("RoutedCutForCausalLM", "model", F.OutputUseKind.UNPACK, "routed_embed") in uses
    assert ("RoutedCutForCausalLM", "use_extra", F.OutputUseKind.UNPACK, "routed_embed") in uses
