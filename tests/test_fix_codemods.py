"""Each fix on the fix_seed_like fixture: the patch written by hand, and the cases it must refuse.

The fixture (tests/fixtures/engines/fix_seed_like) holds one model per fix: noneres.py (fix 1:
`hidden_states + residual` recorded before layer 0 while residual is None), vlwrap.py (fix 2: a
wrapper without the EAGLE-3 methods its language model has), seek.py (fix 3, the founding
story: an output-point loop with ids unchanged, so -1 never reaches the embedding). The
refusals change one detail of a copy of that tree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flowtrace import api
from flowtrace.fix.model import Expectation, FileEdit, Proposal, Verified, Withheld
from flowtrace.fix.run import fix_findings
from flowtrace.fix.verify import Workspace, verify
from flowtrace.index.build import IndexOptions

from fixture_paths import FIXTURES

SEED = FIXTURES / "fix_seed_like"
MODELS = "sglang/srt/models"
OPTIONS = IndexOptions(use_cache=False, jobs=1)


def tree(tmp_path: Path, edits: dict[str, tuple[str, str]] | None = None) -> Path:
    """A copy of the seed tree with ``{file: (old, new)}`` replacements applied."""
    root = tmp_path / "engine"
    shutil.copytree(SEED, root, ignore=shutil.ignore_patterns("__pycache__", ".flowtrace_cache"))
    for name, (old, new) in (edits or {}).items():
        path = root / MODELS / name
        text = path.read_text()
        assert old in text, (name, old)
        path.write_text(text.replace(old, new))
    return root


def run(root: Path, rule: str):
    result = api.scan(root, options=OPTIONS)
    return fix_findings(result, api.findings(result, (rule,)), options=OPTIONS)


def patched(report, name: str) -> str:
    edits = {e.path: e.after for e in report.edits()}
    return edits[f"{MODELS}/{name}"]


def original(name: str) -> str:
    return (SEED / MODELS / name).read_text()


# -- fix 1 ---------------------------------------------------------------------------------

def test_fix1_guards_the_recorded_sum(tmp_path):
    report = run(tree(tmp_path), "FT022")
    assert [v.proposal.rule for v in report.offered] == ["FT022"] and not report.withheld
    want = original("noneres.py").replace(
        "aux_hidden_states.append(hidden_states + residual)  # the stream entering layer i",
        "aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)  # the stream"
        " entering layer i",
    )
    assert patched(report, "noneres.py") == want
    assert any("NoneResForCausalLM ids [-1] L=32: boundaries [0]" in e for e in report.offered[0].evidence)


def test_fix1_refuses_a_difference(tmp_path):
    root = tree(tmp_path, {"noneres.py": ("append(hidden_states + residual)", "append(hidden_states - residual)")})
    report = run(root, "FT022")
    assert not report.offered
    assert "not a plain sum" in report.withheld[0].why


# -- fix 2 ---------------------------------------------------------------------------------

def test_fix2_adds_the_methods_delegating_through_the_attribute(tmp_path):
    report = run(tree(tmp_path), "FT001")
    assert [v.proposal.rule for v in report.offered] == ["FT001"] and not report.withheld
    want = original("vlwrap.py").replace(
        "        return self.language_model(input_ids, hidden_states)\n",
        "        return self.language_model(input_ids, hidden_states)\n"
        "\n"
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
        "        self.language_model.set_eagle3_layers_to_capture(layer_ids)\n"
        "\n"
        "    def get_embed_and_head(self):\n"
        "        return self.language_model.get_embed_and_head()\n",
    )
    assert patched(report, "vlwrap.py") == want
    # PlainForCausalLM serves ids [1, 15, 28] as b = [2, 16, 29] (ids + 1, recorded before layer i)
    assert any(
        "VlWrapForConditionalGeneration ids [1, 15, 28] L=32: boundaries [2, 16, 29]" in e
        for e in report.offered[0].evidence
    )


def test_fix2_refuses_when_the_language_model_lacks_a_method(tmp_path):
    root = tree(tmp_path, {"plainlm.py": ("    def get_embed_and_head(self):\n        return None, None\n\n", "")})
    report = run(root, "FT001")
    assert not report.offered
    assert "PlainForCausalLM has no get_embed_and_head() to hand the call to" in report.withheld[0].why


# -- fix 3 ---------------------------------------------------------------------------------

def test_fix3_records_the_embedding_before_the_loop(tmp_path):
    report = run(tree(tmp_path), "FT009")
    assert [v.proposal.rule for v in report.offered] == ["FT009"] and not report.withheld
    want = original("seek.py").replace(
        "        aux_hidden_states = []\n        # the layers run in order",
        "        aux_hidden_states = []\n"
        "        if -1 in self.layers_to_capture:\n"
        "            aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)\n"
        "        # the layers run in order",
    )
    assert patched(report, "seek.py") == want


def test_fix3_refuses_an_input_point_loop(tmp_path):
    """Recording before layer i: index 0 already is the embedding; the ids are what to change."""
    root = tree(tmp_path, {"seek.py": (
        "            hidden_states, residual = self.layers[i](hidden_states, residual)\n"
        "            if i in self.layers_to_capture:\n"
        "                aux_hidden_states.append(hidden_states + residual)\n",
        "            if i in self.layers_to_capture:\n"
        "                aux_hidden_states.append(hidden_states if residual is None else hidden_states + residual)\n"
        "            hidden_states, residual = self.layers[i](hidden_states, residual)\n",
    )})
    report = run(root, "FT009")
    assert not report.offered
    assert "the loop already records b=0 (index 0)" in report.withheld[0].why


def test_fix3_refuses_when_the_setter_maps_the_id_onto_a_loop_index(tmp_path):
    """ids + 1 at an output-point loop: -1 becomes index 0, which the loop records as b = 1."""
    root = tree(
        tmp_path,
        {
            "seek.py": (
                "self.model.layers_to_capture = list(layer_ids)",
                "self.model.layers_to_capture = [val + 1 for val in layer_ids]",
            )
        },
    )
    report = run(root, "FT009")
    assert not report.offered
    assert "maps id -1 to index 0, which this loop's convention makes b=1" in report.withheld[0].why


# -- verification withholds what the codemod cannot prove ----------------------------------

def _verify(root: Path, proposal: Proposal):
    ws = Workspace(root, profile=None, options=OPTIONS, profile_files=())
    try:
        before = ws.scan()[1]
        return verify(ws, proposal, {}, before)[0]
    finally:
        ws.close()


def _proposal(root: Path, after: str, expect=()) -> Proposal:
    result = api.scan(root, options=OPTIONS)
    finding = api.findings(result, ("FT022",))[0]
    rel = f"{MODELS}/noneres.py"
    return Proposal(
        "FT022",
        finding.fingerprint,
        finding.symbol,
        finding.file,
        finding.line,
        "test",
        (FileEdit(rel, original("noneres.py"), after),),
        tuple(expect),
    )


def test_verification_withholds_a_patch_that_leaves_the_finding(tmp_path):
    root = tree(tmp_path)
    judged = _verify(root, _proposal(root, original("noneres.py") + "# a comment changes nothing\n"))
    assert isinstance(judged, Withheld) and "still reports it" in judged.why


def test_verification_withholds_a_patch_that_does_not_parse(tmp_path):
    root = tree(tmp_path)
    judged = _verify(
        root,
        _proposal(root, original("noneres.py").replace("def forward(self, input_ids", "def forward(self input_ids")),
    )
    assert isinstance(judged, Withheld) and "does not parse" in judged.why


def test_verification_withholds_a_patch_that_serves_other_boundaries(tmp_path):
    """Deleting the capture makes FT022 disappear, but the trace no longer serves the embedding."""
    root = tree(tmp_path)
    gone = original("noneres.py").replace("aux_hidden_states.append(hidden_states + residual)", "pass")
    judged = _verify(root, _proposal(root, gone, [Expectation("NoneResForCausalLM", (-1,), 32, (0,))]))
    assert isinstance(judged, Withheld)


def test_the_unpatched_seed_tree_is_left_alone(tmp_path):
    before = {p: p.read_bytes() for p in SEED.rglob("*.py")}
    report = run(tree(tmp_path), "FT0")
    assert len(report.offered) == 3
    assert {p: p.read_bytes() for p in SEED.rglob("*.py")} == before


@pytest.mark.parametrize("rule", ["FT001", "FT009", "FT022"])
def test_offered_patches_are_verified(tmp_path, rule):
    report = run(tree(tmp_path), rule)
    assert all(isinstance(v, Verified) and v.evidence for v in report.offered)
