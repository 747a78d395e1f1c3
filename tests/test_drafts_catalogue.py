"""The draft catalogue (rules/drafts/, docs/drafts.md): its schema, its entries' validity, and
the grading it drives on the fixture engine ``tests/fixtures/rules/drafts_like`` with the fixture
catalogue beside it (``drafts.toml``), so the grading cases do not depend on the shipped data.

Expected values are written from reading the fixture modules (each docstring says what must
fire) and the catalogue files, never copied from output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowtrace import api
from flowtrace.cli.main import main
from flowtrace.engines.drafts import load_catalogue, shipped_catalogue
from flowtrace.engines.training import id_range, invalid_ids, load_conventions
from flowtrace.errors import ProfileError
from flowtrace.model.consequence import Consequence
from flowtrace.render.drafts_doc import drafts_markdown

from fixture_paths import RULE_FIXTURES

REPO = Path(__file__).resolve().parents[1]
FIXTURE = RULE_FIXTURES / "drafts_like"
CATALOGUE = FIXTURE / "drafts.toml"


# -- the shipped data ----------------------------------------------------------------------------


def test_the_shipped_catalogue_holds_enough_drafts_over_enough_families():
    c = shipped_catalogue()
    assert len(c.drafts) >= 40
    assert len({d.family for d in c.drafts if d.confirmed}) >= 12
    assert len({d.name for d in c.drafts}) == len(c.drafts)  # names are unique
    assert {t.name for t in c.trainers} >= {"SpecForge default", "EAGLE reference", "speculators default"}


def test_every_shipped_entry_is_valid_for_its_layer_count_under_its_convention():
    conventions = load_conventions()
    for d in shipped_catalogue().drafts:
        conv = conventions[d.convention]
        assert d.source.startswith(("https://", "pypi:")), d.name
        assert d.confirmed == (d.unconfirmed is None), d.name
        assert all(a.isidentifier() for a in d.architectures), d.name
        if d.ids is not None:
            assert d.key, d.name
            low, high = id_range(conv.meaning, d.num_hidden_layers)
            assert all(low <= i <= high for i in d.ids), (d.name, d.ids, low, high)
            assert len(set(d.ids)) == len(d.ids), d.name
            assert invalid_ids(conv.meaning, list(d.ids), d.num_hidden_layers) is None


def test_trained_layouts_follow_the_convention():
    c = shipped_catalogue()
    # SpecForge wrote [1, 29, 57] for DeepSeek-V3 (61 layers): "output of layer i", b = i + 1
    assert c.trained(c.find("specforge/deepseek-v3-671b-eagle3")) == (2, 30, 58)
    # no ids: SpecForge's default [1, L // 2 - 1, L - 4] for Qwen3-8B (36 layers) -> b = 2, 18, 33
    assert c.trained(c.find("specforge/qwen3-8b-eagle3")) == (2, 18, 33)
    # the GPT-OSS v3 draft names boundaries, the last one the last layer's output b = L = 36
    assert c.trained(c.find("nvidia/gpt-oss-120b-Eagle3-v3")) == (24, 30, 36)


def test_the_committed_drafts_doc_is_generated_from_the_data():
    assert (REPO / "docs" / "drafts.md").read_text(encoding="utf-8") == drafts_markdown(shipped_catalogue())


# -- the schema: one line naming the file and the entry -------------------------------------------


ENTRY = """
[[draft]]
name = "mine/x"
target = "me/target"
architectures = ["XForCausalLM"]
num_hidden_layers = 32
trainer = "SpecForge"
convention = "specforge"
source = "https://example.org/x"
"""


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ('ids = [1, 15, 28]\n', "ids need the key"),
        ('key = "eagle_config.eagle_aux_hidden_state_layer_ids"\nids = [1, 15, 32]\n', "[32] outside -1..31"),
        ('key = "eagle_config.eagle_aux_hidden_state_layer_ids"\nids = [1, 1, 28]\n', "duplicates"),
        ('key = "k"\nids = [1, "15", 28]\n', "expected integers"),
        ("confirmed = false\n", "exactly when 'confirmed = false'"),
        ('colour = "blue"\n', "unknown key(s) colour"),
    ],
)
def test_a_malformed_entry_is_one_error_naming_file_and_entry(tmp_path, extra, words):
    path = tmp_path / "mine.toml"
    path.write_text(ENTRY + extra, encoding="utf-8")
    with pytest.raises(ProfileError) as err:
        load_catalogue([path])
    text = str(err.value)
    assert str(path) in text and "'mine/x'" in text and words in text and "\n" not in text


def test_a_users_entry_replaces_a_shipped_one_of_the_same_name(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(ENTRY.replace("mine/x", "specforge/qwen3-8b-eagle3"), encoding="utf-8")
    c = load_catalogue([path])
    replaced = c.find("specforge/qwen3-8b-eagle3")
    assert replaced.architectures == ("XForCausalLM",) and replaced.file == "mine.toml"
    assert len(c.drafts) == len(shipped_catalogue().drafts)


# -- grading on the fixture engine ----------------------------------------------------------------


def _graded(drafts=(CATALOGUE,)):
    result = api.scan(FIXTURE, drafts_files=tuple(drafts))
    models = "sglang/srt/models/"
    return {(f.rule, f.file.removeprefix(models), f.line): f for f in api.findings(result)}


SW, CS, CU, FR, RS = (
    Consequence.SILENT_WRONG,
    Consequence.CRASH_SERVING,
    Consequence.CRASH_STARTUP,
    Consequence.FRAGILE,
    Consequence.REFUSED_STARTUP,
)


def test_each_grading_case_of_the_fixture_engine():
    found = _graded()
    expected = {
        ("FT007", "family.py", 10): (FR, "warning"),  # deliberate convention, both family drafts served right
        ("FT007", "slip.py", 9): (SW, "error"),  # identity slip: fixture/slip gets b=[1, 15, 28]
        ("FT010", "last.py", 20): (CS, "error"),  # fixture/last-boundary asks for b = L = 36
        ("FT010", "nolast.py", 19): (None, "info"),  # no draft of that family asks for b = L
        ("FT005", "startup.py", 13): (CU, "warning"),  # bare output unpacked by the start-up forward
        ("FT001", "refused.py", 48): (RS, "info"),  # a clean refusal with the engine's message
        ("FT008", "defaults.py", 12): (FR, "warning"),  # its draft ships no ids and was trained on b = 3, 17, 30
    }
    got = {k: (f.consequence, f.severity) for k, f in found.items() if k in expected}
    assert got == expected
    assert "fixture/family-capture-index" in found["FT007", "family.py", 10].effect
    assert "fixture/family-output-of-layer" in found["FT007", "family.py", 10].effect
    assert (
        "fixture/slip (ids [1, 15, 28], L=32) silently receives b=[1, 15, 28] instead of b=[2, 16, 29]"
        in found["FT007", "slip.py", 9].effect
    )
    assert (
        "fixture/last-boundary (ids [24, 30, 36], L=36) gets 2 states (b=[25, 31]) instead of 3"
        in found["FT010", "last.py", 20].effect
    )
    assert "does not say why" in found["FT005", "startup.py", 13].effect


def test_without_the_fixture_catalogue_the_trainers_defaults_stand_in():
    # The families have no published draft in the shipped catalogue, so the trainers' default
    # layouts written in SGLang's convention (no ids: the engine's default) are what is served.
    found = _graded(drafts=())
    # defaults.py: SpecForge's default trains b = 2, 16, 29 at L = 32, the class serves 3, 17, 30
    defaults = found["FT008", "defaults.py", 12]
    assert (defaults.consequence, defaults.severity) == (SW, "error")
    assert "a draft trained on the SpecForge default layout" in defaults.effect
    # last.py: no draft asks for b = L any more
    assert found["FT010", "last.py", 20].consequence is None


def test_drafts_reach_check_from_the_command_line_and_from_the_config(tmp_path):
    runner = CliRunner()
    args = ["check", str(FIXTURE), "--no-cache", "--select", "FT010", "--output-format", "json"]
    cli = json.loads(runner.invoke(main, [*args, "--drafts", str(CATALOGUE)]).stdout)
    assert {f["severity"] for f in cli["findings"] if f["file"].endswith("/last.py")} == {"error"}
    config = tmp_path / "flowtrace.toml"
    config.write_text(f'drafts = ["{CATALOGUE}"]\n', encoding="utf-8")
    cfg = json.loads(runner.invoke(main, [*args, "--config", str(config)]).stdout)
    assert {f["severity"] for f in cfg["findings"] if f["file"].endswith("/last.py")} == {"error"}
    plain = json.loads(runner.invoke(main, args).stdout)
    assert {f["severity"] for f in plain["findings"] if f["file"].endswith("/last.py")} == {"info"}


def test_a_draft_class_sized_for_three_states_cannot_load_the_five_state_draft():
    found = _graded()
    fixed = found["FT029", "eagle3.py", 11]
    assert (fixed.consequence, fixed.severity) == (CU, "warning")
    assert "fixture/five-states (5 states)" in fixed.message


# -- compat: what is not a draft, impossible ids, catalogue drafts --------------------------------


def _compat(*args):
    return CliRunner().invoke(main, ["compat", str(FIXTURE), "--no-cache", *args])


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


TARGET = {"architectures": ["PlainAForCausalLM"], "num_hidden_layers": 32, "hidden_size": 64}


@pytest.mark.parametrize("draft", [{}, TARGET], ids=["empty", "the-targets-own-config"])
def test_compat_refuses_a_config_that_is_not_a_draft(tmp_path, draft):
    target = _write(tmp_path / "target.json", TARGET)
    res = _compat("--target-config", str(target), "--draft-config", str(_write(tmp_path / "draft.json", draft)))
    assert res.exit_code == 2
    (line,) = res.stderr.splitlines()
    assert "not an EAGLE-3 draft config" in line and "--trained-boundaries" in line
    # ... unless the user states what it was trained on
    given = _compat(
        "--target-config",
        str(target),
        "--draft-config",
        str(tmp_path / "draft.json"),
        "--trained-boundaries",
        "2,16,29",
    )
    assert given.exit_code == 0, given.output  # PlainA's default serves b = 2, 16, 29


@pytest.mark.parametrize(("ids", "words"), [([1, 1, 28], "duplicates"), ([-2, 15, 28], "[-2] outside -1..31")])
def test_compat_refuses_ids_the_convention_cannot_mean(tmp_path, ids, words):
    target = _write(tmp_path / "target.json", TARGET)
    draft = _write(
        tmp_path / "draft.json",
        {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}},
    )
    res = _compat("--target-config", str(target), "--draft-config", str(draft))
    assert res.exit_code == 2
    (line,) = res.stderr.splitlines()
    assert words in line and "valid ids are distinct integers -1..31" in line


def test_compat_verbose_says_the_convention_and_default_assumed(tmp_path):
    target = _write(tmp_path / "target.json", TARGET)
    draft = _write(tmp_path / "draft.json", {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {}})
    res = _compat("--target-config", str(target), "--draft-config", str(draft), "-v")
    assert (
        "training convention: specforge" in res.stderr and "detected: the draft config has eagle_config" in res.stderr
    )
    assert "assumed trained on the specforge default [1, L // 2 - 1, L - 4] = [1, 15, 28]" in res.stderr


def test_compat_takes_a_catalogue_draft():
    drafts = ("--drafts", str(CATALOGUE))
    ok = _compat(*drafts, "--draft", "fixture/family-output-of-layer")
    assert ok.exit_code == 0 and ok.stdout.startswith("MATCH: FamilyForCausalLM"), ok.output
    slip = _compat(*drafts, "--draft", "fixture/slip")
    assert slip.exit_code == 1 and "served b=1" in slip.stdout  # b = 2 trained, identity serves 1
    five = _compat(*drafts, "--draft", "fixture/five-states")
    assert five.exit_code == 1
    assert (
        "draft class: the engine loads this draft with LlamaForCausalLMEagle3, whose fc takes 3 states" in five.stdout
    )
    assert "fix: set" not in five.stdout
    unknown = _compat(*drafts, "--draft", "fixture/slp")
    assert unknown.exit_code == 2 and "did you mean fixture/slip" in unknown.stderr


# -- dataflow slips: the residual added by the layer, a dropped aux a caller unpacks ---------------


def test_a_layer_or_loop_that_adds_the_residual_itself_is_not_missing_it():
    found = _graded()
    fired = {file for rule, file, _ in found if rule == "FT013"}
    assert fired == {"delta.py"}  # folds.py (+= residual) and mixes.py (a contraction) stay silent
    delta = found["FT013", "delta.py", 29]
    assert (delta.consequence, delta.severity) == (SW, "error")


def test_a_dropped_aux_that_a_caller_unpacks_is_a_crash():
    found = _graded()
    one_value = found["FT020", "early.py", 25]
    assert (one_value.consequence, one_value.severity) == (CS, "error")
    assert "unpacks `hidden_states, aux = out`" in one_value.effect and "ValueError" in one_value.effect
    a_tuple = found["FT020", "early.py", 47]
    assert (a_tuple.consequence, a_tuple.severity) == (SW, "error")


def test_the_runners_order_decides_whether_the_first_forward_crash_is_met_at_start_up():
    # model_executor/model_runner.py captures its graphs after a bare set_eagle3_layers_to_capture()
    # (the flag on, the default layers) and sets the draft's ids only afterwards.
    found = _graded()
    bare = found["FT005", "startup.py", 13]  # the flag alone makes the wrapper unpack: at start-up
    assert (bare.consequence, bare.severity) == (CU, "warning")
    zero = found["FT022", "zero.py", 21]  # needs the draft's ids, set after the capture: first request
    assert (zero.consequence, zero.severity) == (CS, "error")
    assert "captures its graphs at start-up before its runner sets the draft's ids" in zero.effect
