"""Every profile key is declared once, on its ``Profile`` field; the rest is derived.

The loader's tables and keys, the merge into ``Conventions`` and the ``[checks]`` values the
rules read all come from those declarations. These tests hold the derived parts to them: a
``Conventions`` attribute no declaration feeds (or a declaration feeding none), a ``[checks]``
field the rules read that no key declares, an undocumented key, all fail here.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from flowtrace.engines.check_conventions import CheckConventions, check_conventions
from flowtrace.engines.profiles import Conventions, Profile, ProfileError, load_profile, profile_keys, profile_tables

REPO = Path(__file__).resolve().parents[1]
# computed by Conventions.merge (the [methods.*] tables: every method, the chosen one, its default-id function) or the
# index (the root package) or from other keys (the collector classes: containers and packers), not a key of their own
DERIVED = {"setter_order", "markers", "digest", "package", "methods_served", "method", "id_functions", "collectors"}


def test_conventions_attributes_are_exactly_the_merged_declarations():
    merged = {spec.merged or name for _, _, name, spec in profile_keys() if spec.merged != ""}
    assert {f.name for f in fields(Conventions)} == merged | DERIVED


def test_check_conventions_fields_are_the_checks_table():
    assert tuple(f.name for f in fields(CheckConventions)) == profile_tables()["checks"]


def test_every_key_is_documented():
    doc = (REPO / "docs" / "profiles.md").read_text(encoding="utf-8")
    for table, keys in profile_tables().items():
        assert f"`[{table}]`" in doc, table
        for key in keys:
            assert f"`{key}`" in doc, (table, key)


def test_every_field_but_path_and_digest_is_a_key():
    declared = {name for _, _, name, _ in profile_keys()}
    assert {f.name for f in fields(Profile)} - declared == {"path", "digest"}


def _profile(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text('[engine]\nname = "x"\n' + body)
    return path


def test_checks_patterns_get_the_same_regex_guard(tmp_path):
    # (a+)+ backtracks: refused in [checks] as in [registry]
    with pytest.raises(ProfileError, match=r"\[checks\] draft_class_patterns: '\(a\+\)\+': nested repetition"):
        load_profile(_profile(tmp_path, '[checks]\ndraft_class_patterns = ["MTP$", "(a+)+"]\n'))
    with pytest.raises(ProfileError, match=r"\[checks\] non_target_patterns: '\[': not a valid regular expression"):
        load_profile(_profile(tmp_path, '[checks]\nnon_target_patterns = ["["]\n'))


def test_checks_read_with_the_profile_and_combined(tmp_path):
    a = load_profile(
        _profile(
            tmp_path,
            '[checks]\ntarget_methods = ["m1", "m2"]\nembedding_id = -1\ncapture_families = [{ name = "F", setters ='
            ' ["set_f"] }]\n',
        )
    )
    (tmp_path / "b").mkdir()
    b = load_profile(_profile(tmp_path / "b", '[checks]\ntarget_methods = ["m2", "m3"]\nembedding_id = 0\n'))
    cc = check_conventions([a, b])
    assert cc.target_methods == ("m1", "m2", "m3")
    assert cc.embedding_id is None  # the two profiles disagree
    assert cc.family_of("set_f").name == "F"
    assert check_conventions([a]).embedding_id == -1


def test_unknown_checks_key_and_wrong_type(tmp_path):
    with pytest.raises(ProfileError, match=r"\[checks\] has unknown key\(s\) target_method$"):
        load_profile(_profile(tmp_path, '[checks]\ntarget_method = ["m"]\n'))
    with pytest.raises(ProfileError, match=r"\[checks\] embedding_id must be a int, found bool"):
        load_profile(_profile(tmp_path, "[checks]\nembedding_id = true\n"))
