"""Profiles are data, validated at load with one clear line per problem."""

from __future__ import annotations

import shutil

import pytest

from flowtrace.engines.profiles import ProfileError, load_profile, rules_directory, select_profiles

from fixture_paths import SGLANG_LIKE, VLLM_LIKE


def test_shipped_profiles_load():
    for path in sorted((rules_directory() / "engines").glob("*.toml")):
        profile = load_profile(path)
        # every engine names how its ids arrive: a setter, a config attribute/context, or a hook
        assert profile.markers and (profile.setters or profile.config_keys or profile.context_fields or profile.hooks)


def test_detection_from_the_tree():
    assert [p.name for p in select_profiles(SGLANG_LIKE)] == ["sglang"]
    assert [p.name for p in select_profiles(VLLM_LIKE)] == ["vllm"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace("[registry]", "[registr]"), "unknown table(s) [registr]"),
        (lambda t: t.replace('layers_attribute = "layers"', 'layers_attribute = 3'), "layers_attribute must be a str"),
        (lambda t: t.replace("[capture]", "[capture]\nsetter = []"), "unknown key(s) setter"),
        (lambda t: t + "\n[[[", "not valid TOML"),
    ],
)
def test_malformed_profile_names_file_and_key(tmp_path, edit, message):
    source = rules_directory() / "engines" / "sglang.toml"
    broken = tmp_path / "sglang.toml"
    broken.write_text(edit(source.read_text()))
    with pytest.raises(ProfileError) as err:
        load_profile(broken)
    assert str(broken) in str(err.value) and message in str(err.value)


def test_forced_unknown_profile_lists_the_choices(tmp_path):
    shutil.copytree(rules_directory(), tmp_path / "rules")
    with pytest.raises(ProfileError, match=r"available: (\w+, )*sglang, (\w+, )*vllm"):
        select_profiles(SGLANG_LIKE, "trt", tmp_path / "rules")
