"""flowtrace diff: capture-support changes between two releases of a fixture engine.

tests/fixtures/diff/relay_v1 and relay_v2 are two hand-written releases of one SGLang-shaped
engine. Their docstrings state the differences; the expectations below are written from
reading the two trees:

- north.py: ``[val + 1 for val in layer_ids]`` becomes "+1 only if the first id is 1".
- south.py: the setter and capture loop are removed (capture support lost).
- west.py: a setter and capture loop are added (capture support gained).
- point.py: the append moves from before layer i runs to after it: capture point input ->
  output, the embedding stops being capturable, the last layer's output becomes capturable.
- fallback.py: the default ids change from [2, n // 2, n - 3] to [1, n // 2 - 1, n - 4].
- brand.py: a new file in release 2 only, with capture support (gained, absent before).
- mute.py: release 1 has a setter but no capture loop (broken), release 2 no setter (none):
  only the support change is reported, no capture facts.
- east.py and deaf.py are identical in both releases (no change may be reported).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowtrace import api
from flowtrace.analysis.diff import diff_document
from flowtrace.cli.main import main
from flowtrace.index.build import IndexOptions

FIXTURES = Path(__file__).parent / "fixtures" / "diff"
V1, V2 = FIXTURES / "relay_v1", FIXTURES / "relay_v2"
OPTIONS = IndexOptions(use_cache=False, jobs=1)


@pytest.fixture(scope="module")
def changes():
    return api.diff(V1, V2, options=OPTIONS)


def by_class(changes, name):
    return {(c.kind, c.field): (c.old, c.new) for c in changes if c.cls == name}


def test_gained_and_lost(changes):
    assert by_class(changes, "WestForCausalLM") == {("gained", "support"): ("none", "supported")}
    assert by_class(changes, "SouthForCausalLM") == {("lost", "support"): ("supported", "none")}
    assert by_class(changes, "BrandForCausalLM") == {("gained", "support"): (None, "supported")}


def test_transform_change(changes):
    north = by_class(changes, "NorthForCausalLM")
    assert north[("changed", "id_transform")] == ("plus_one", "conditional")
    assert set(north) <= {("changed", "id_transform"), ("changed", "effective_transform")}


def test_capture_point_and_capturability(changes):
    assert by_class(changes, "PointForCausalLM") == {
        ("changed", "capture_point"): ("input", "output"),
        ("changed", "embedding_capturable"): (True, False),
        ("changed", "last_layer_capturable"): (False, True),
    }


def test_default_layers(changes):
    ((kind, field), (old, new)), = by_class(changes, "FallbackForCausalLM").items()
    assert (kind, field) == ("changed", "default_layers")
    assert "num_layers - 3" in old and "num_layers - 4" in new


def test_classes_that_cannot_capture_report_only_support(changes):
    assert by_class(changes, "MuteForCausalLM") == {("changed", "support"): ("broken", "none")}


def test_unchanged_classes_are_silent(changes):
    assert not by_class(changes, "EastForCausalLM") and not by_class(changes, "DeafForCausalLM")


def test_json_document_and_exit_1():
    out = CliRunner().invoke(main, ["diff", str(V1), str(V2), "--output-format", "json", "--no-cache"])
    assert out.exit_code == 1
    doc = json.loads(out.stdout)
    assert doc["schema"] == "flowtrace.diff/1"
    west = next(c for c in doc["changes"] if c["class"] == "WestForCausalLM")
    assert west["kind"] == "gained" and west["qualname"] == "sglang.srt.models.west.WestForCausalLM"
    assert {"class", "qualname", "kind", "field", "old", "new"} <= set(west)
    assert doc["summary"]["gained"] == 2 and doc["summary"]["lost"] == 1


def test_text_is_default_and_same_tree_exits_0():
    changed = CliRunner().invoke(main, ["diff", str(V1), str(V2), "--no-cache"])
    assert (
        changed.exit_code == 1 and "NorthForCausalLM" in changed.stdout and "plus_one -> conditional" in changed.stdout
    )
    same = CliRunner().invoke(main, ["diff", str(V1), str(V1), "--no-cache"])
    assert same.exit_code == 0 and same.stdout.startswith("no capture-support changes")


def test_missing_tree_exits_2(tmp_path):
    out = CliRunner().invoke(main, ["diff", str(V1), str(tmp_path / "nope"), "--no-cache"])
    assert out.exit_code == 2 and "flowtrace: error:" in out.output and "Traceback" not in out.output


def test_reversed_diff_swaps_gained_and_lost(changes):
    back = api.diff(V2, V1, options=OPTIONS)
    assert by_class(back, "WestForCausalLM") == {("lost", "support"): ("supported", "none")}
    assert len(back) == len(changes)
    assert diff_document(back, "b", "a")["summary"]["classes"] == 7
    assert by_class(back, "BrandForCausalLM") == {("lost", "support"): ("supported", None)}
