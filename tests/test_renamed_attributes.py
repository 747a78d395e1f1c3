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
    # models/staged.py: [1, depth // 2, stage_stop - 2] with depth = stage_stop = 32; input capture: b = i.
    assert api.trace(quire, "StagedForCausalLM", None, L).boundaries == (1, 16, 30)
    # val + 1 - stage_begin with stage_begin = 0.
    assert api.trace(quire, "StagedForCausalLM", [3, 10], L).boundaries == (4, 11)


def test_without_the_keys_the_names_mean_nothing(quire, tmp_path):
    """The same tree with the keys removed from its profile: nothing binds the metadata's flags or
    the setter's layer count, so neither default gives ids (the names alone say nothing)."""
    text = PROFILE.read_text()
    for key in ("layer_count_attributes", "stage_start_attributes", "stage_end_attributes", "target_false_flags"):
        text = "\n".join(line for line in text.splitlines() if not line.startswith(key))
    bare = tmp_path / "quire.toml"
    bare.write_text(text)
    scanned = api.scan(ROOT, profile_files=(bare,), options=api.IndexOptions(jobs=1, use_cache=False))
    hooked = api.trace(scanned, "HookedForCausalLM", None, L)
    # __post_init__ tests self.drafting first: unbound, it cannot be evaluated.
    assert hooked.boundaries is None and "cannot evaluate: self.drafting" in hooked.problems[0]
    staged = api.trace(scanned, "StagedForCausalLM", None, L)
    assert staged.boundaries is None and "cannot evaluate: self.depth" in staged.problems[0]
    explicit = api.trace(scanned, "StagedForCausalLM", [3, 10], L)  # val + 1 - self.stage_begin
    assert explicit.boundaries is None and "cannot evaluate: self.stage_begin" in explicit.problems[0]
