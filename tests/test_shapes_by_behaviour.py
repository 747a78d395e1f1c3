"""Capture shapes found by what the code does, not by profile names (issue 25, item 3).

Expected values are written from reading tests/fixtures/engines/shapes_like/sglang/srt/models/sampi.py
(a tree of its own, so the sglang_like fixture's counts and majority conventions stay as they are)."""

from __future__ import annotations

import pytest

from fixture_paths import FIXTURES
from flowtrace import api
from flowtrace.index.build import IndexOptions
from flowtrace.model import facts as F

SAMPI = "sglang/srt/models/sampi.py"


SHAPES_LIKE = FIXTURES / "shapes_like"


@pytest.fixture(scope="module")
def shapes_scan():
    return api.scan(SHAPES_LIKE, options=IndexOptions(use_cache=False, jobs=1))


def _line(text: str) -> int:
    """The line of the fixture that holds ``text``."""
    source = (SHAPES_LIKE / SAMPI).read_text().splitlines()
    return next(n for n, line in enumerate(source, 1) if text in line)


def _site(scan, cls: str) -> F.CaptureSiteFact:
    return next(s for ff in scan.files for s in ff.capture_sites if s.class_qualname.endswith("." + cls))


def test_helper_not_named_by_the_profile_with_a_collector_built_by_a_call(shapes_scan) -> None:
    site = _site(shapes_scan, "SampiModel")
    assert (site.mechanism, site.point) == (F.Mechanism.HELPER, F.Point.INPUT)
    assert (site.helper_method, site.container, site.label_offset) == ("_stash", "aux", 1)
    assert site.location == F.Location(SAMPI, _line("self._stash(aux, idx + 1"))  # the call after layer idx
    # _stash(aux, 0, ...) before the loop
    assert (site.embedding_capturable, site.last_layer_capturable) == (True, True)
    row = shapes_scan.project.row("SampiForCausalLM")
    assert row.support == F.Support.SUPPORTED
    assert api.trace(shapes_scan, "SampiForCausalLM", [-1, 1, 31], 32).boundaries == (0, 2, 32)


def test_helper_recording_into_its_own_object(shapes_scan) -> None:
    site = _site(shapes_scan, "SanModel")
    assert (site.mechanism, site.point) == (F.Mechanism.HELPER, F.Point.INPUT)
    # kept on self: no collector handed
    assert (site.helper_method, site.container, site.label_offset) == ("_note", None, 1)
    assert site.captured_expression == "hidden_states"
    assert (site.embedding_capturable, site.last_layer_capturable) == (True, True)  # _note(0, ...) before the loop
    assert api.trace(shapes_scan, "SanForCausalLM", [-1, 1, 31], 32).boundaries == (0, 2, 32)


def test_layer_marked_by_a_flag_from_the_ids_whose_stream_the_loop_records(shapes_scan) -> None:
    site = _site(shapes_scan, "ShoModel")
    # decided in the layer
    assert (site.mechanism, site.point, site.callback_parameter) == (F.Mechanism.FLAGGED, F.Point.UNKNOWN, "keep_prev")
    assert (site.attribute, site.container, site.label_offset) == ("layers_to_capture", "aux", 0)
    capture = shapes_scan.project.row("ShoForCausalLM").capture
    assert capture.point == F.Point.INPUT  # the layer returns the stream it was handed, before self.proj
    # b=L: the append after the loop
    assert (capture.embedding_capturable, capture.last_layer_capturable) == (True, True)
    assert api.trace(shapes_scan, "ShoForCausalLM", [-1, 1, 31], 32).boundaries == (0, 2, 32)
