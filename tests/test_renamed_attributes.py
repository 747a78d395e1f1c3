"""What a setter or a metadata's default method reads besides the ids is bound by what the
profile says it means, never by a bundled engine's spelling (tests/fixtures/engines/renamed_like:
``self.depth``, ``self.stage_begin``, ``self.stage_stop``, ``self.drafting``, ``self.single_state``).

Expectations are written from the fixture modules' docstrings and code.
"""

from __future__ import annotations

import pytest

from flowtrace import api
from flowtrace.engines.profiles import load_profile

from fixture_paths import FIXTURES

ROOT = FIXTURES / "renamed_like"
PROFILE = ROOT / "quire.toml"
L = 32


@pytest.fixture(scope="module")
def quire():
    return api.scan(ROOT, profile_files=(PROFILE,), options=api.IndexOptions(jobs=1, use_cache=False))


def test_the_profile_names_each_meaning():
    profile = load_profile(PROFILE)
    assert profile.layer_count_attributes == ("depth",)
    assert (profile.stage_start_attributes, profile.stage_end_attributes) == (("stage_begin",), ("stage_stop",))
    assert profile.metadata_layer_counts == ("depth",)
    assert profile.target_false_flags == ("drafting", "single_state")


def test_metadata_defaults_read_the_profiles_layer_count_and_flags(quire):
    # spec/metadata.py: drafting and single_state False, depth = 32 -> (2, 16, 30); after the MLP: b = i + 1.
    traced = api.trace(quire, "HookedForCausalLM", None, L)
    assert traced.problems == () and traced.boundaries == (3, 17, 31)
    default = next(s for s in traced.steps if s.kind == "default")
    assert "TargetStateMetadata.__post_init__" in default.text and "[2, 16, 30]" in default.text


def test_given_serving_ids_are_sorted(quire):
    assert api.trace(quire, "HookedForCausalLM", [20, 4], L).boundaries == (5, 21)


def test_setter_reads_the_profiles_layer_count_and_stage(quire):
    # models/staged.py: [1, depth // 2, len(self.trunk.layers) - 2] with depth = 32 and a trunk of
    # 32 layers (no bundled profile's owner name); input capture: b = i.
    assert api.trace(quire, "StagedForCausalLM", None, L).boundaries == (1, 16, 30)
    # val + 1 - stage_begin for val < stage_stop, with stage_begin = 0 and stage_stop = 32.
    assert api.trace(quire, "StagedForCausalLM", [3, 10], L).boundaries == (4, 11)


def _without(tmp_path, *keys: str):
    """The fixture scanned with its profile minus ``keys`` (their lines)."""
    text = "\n".join(line for line in PROFILE.read_text().splitlines() if not line.startswith(keys))
    bare = tmp_path / "quire.toml"
    bare.write_text(text)
    return api.scan(ROOT, profile_files=(bare,), options=api.IndexOptions(jobs=1, use_cache=False))


@pytest.mark.parametrize(
    "key, model, ids, unbound",
    [
        # spec/metadata.py __post_init__ tests self.drafting first, then self.single_state.
        ("target_false_flags", "HookedForCausalLM", None, "self.drafting"),
        # models/staged.py: the default reads self.depth; given ids, self.stage_stop, then self.stage_begin.
        ("layer_count_attributes", "StagedForCausalLM", None, "self.depth"),
        ("stage_end_attributes", "StagedForCausalLM", [3, 10], "self.stage_stop"),
        ("stage_start_attributes", "StagedForCausalLM", [3, 10], "self.stage_begin"),
    ],
)
def test_without_a_key_its_name_means_nothing(tmp_path, key, model, ids, unbound):
    """The same tree with one key removed from its profile: the name it declared is bound to
    nothing, so the trace cannot evaluate it (the name alone says nothing)."""
    traced = api.trace(_without(tmp_path, key), model, ids, L)
    assert traced.boundaries is None and f"cannot evaluate: {unbound}" in traced.problems[0]


def test_the_metadata_layer_count_is_its_own_key(tmp_path):
    """Without the layer counts (the profile names self.depth in [capture] and [metadata_hook]),
    the metadata's flags are still false and its default branch reads an unbound count."""
    scanned = _without(tmp_path, "layer_count_attributes")
    traced = api.trace(scanned, "HookedForCausalLM", None, L)
    assert traced.boundaries is None and "cannot evaluate: self.depth" in traced.problems[0]


def test_a_collector_built_by_its_own_classmethod_is_the_profiles_container(quire):
    # models/stacked.py: states = StateStack.sized(...) (line 35), a packer by the profile; the
    # stream is recorded before layer i runs (line 38): ids [3, 10] -> boundaries (3, 10).
    row = next(r for r in quire.rows if r.name == "StackedForCausalLM")
    site = row.chain.site
    assert (row.support, site.mechanism.value, site.container) == ("supported", "packer", "states")
    assert site.location.line == 38
    assert api.trace(quire, "StackedForCausalLM", [3, 10], L).boundaries == (3, 10)
