"""``scan --method all``: one answer per method a class serves, in the text matrix, the JSON,
the HTML report and the findings; without ``--method`` nothing of it appears.

Every expectation is read off the fixture engine tests/fixtures/methods/sglang_methods (its
README tabulates it): each model has an EAGLE-3 setter that adds 1 and a DFlash setter that
adds 1 (shared.py, shared_moe.py), adds its own 1 and hands the ids to the inner model's DFlash
setter (own_plus.py), stores them as given (identity.py), or hands them to a text model without a
DFlash setter (wrap_vl.py). The sglang profile serves EAGLE-3 (the default), DFlash and DSpark,
whose runner calls ``set_dflash_layers_to_capture`` when a model has no DSpark setter (none has
one here): DSpark's answers are DFlash's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixture_paths import line_of as _line
from flowtrace.cli.main import main
from flowtrace.render.html import render_html

FIXTURE = Path(__file__).parent / "fixtures" / "methods" / "sglang_methods"
MODELS = FIXTURE / "sglang" / "srt" / "models"
SERVED = ["EAGLE-3", "DFlash", "DSpark"]


def _scan(tmp_path: Path, *args: str) -> str:
    run = CliRunner().invoke(main, ["scan", str(FIXTURE), "--no-cache", "-q", *args])
    assert run.exit_code == 0, run.output
    return run.output


@pytest.fixture(scope="module")
def all_doc(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("all") / "scan.json"
    args = ["scan", str(FIXTURE), "--no-cache", "-q", "--method", "all", "--format", "json", "-o", str(out)]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def plain_doc(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("plain") / "scan.json"
    run = CliRunner().invoke(main, ["scan", str(FIXTURE), "--no-cache", "-q", "--format", "json", "-o", str(out)])
    assert run.exit_code == 0, run.output
    return json.loads(out.read_text())


def _matrix(text: str) -> tuple[list[str], list[list[str]]]:
    """The text matrix's header and lines, split on the two-space column gaps."""
    lines = text.split("\n\n")[1].splitlines()
    split = [re.split(r"\s{2,}", line.strip()) for line in lines]
    return split[0], split[2:]


# -- text -------------------------------------------------------------------------------------


def test_text_matrix_has_a_line_per_method_each_class_serves(tmp_path):
    header, lines = _matrix(_scan(tmp_path, "--method", "all"))
    assert header[:3] == ["class", "method", "registered"]
    col = {name: i for i, name in enumerate(header)}
    by = {(line[0], line[1]): line for line in lines}
    identity = MODELS / "identity.py"
    # IdentityForCausalLM: EAGLE-3 adds 1 in its own setter; DFlash (and DSpark, through the same
    # setter) stores the ids as given
    eagle3 = by[("IdentityForCausalLM", "EAGLE-3")]
    assert eagle3[col["id transform"]] == "plus_one"
    at = "setter: sglang/srt/models/identity.py:"
    assert eagle3[col["id source"]] == at + str(_line(identity, "def set_eagle3_layers_to_capture"))
    for method in ("DFlash", "DSpark"):
        line = by[("IdentityForCausalLM", method)]
        assert line[col["id transform"]] == "identity"
        assert line[col["id source"]] == at + str(_line(identity, "def set_dflash_layers_to_capture"))
    # OwnPlusForCausalLM: the DFlash setter adds 1 and delegates to OwnPlusModel's identity setter
    assert by[("OwnPlusForCausalLM", "DFlash")][col["support"]] == "delegated"
    assert by[("OwnPlusForCausalLM", "DFlash")][col["id transform"]] == "plus_one"
    # WrapVL delegates both; only EAGLE-3's target (InnerTextModel) defines the setter
    assert by[("WrapVLForConditionalGeneration", "EAGLE-3")][col["support"]] == "delegated"
    assert by[("WrapVLForConditionalGeneration", "DFlash")][col["support"]] == "broken"
    # InnerTextModel holds only the EAGLE-3 setter: it serves no other method, so it has one line
    assert [line[1] for line in lines if line[0] == "InnerTextModel"] == ["EAGLE-3"]
    # each class's lines in the served order, the default first
    for cls in ("IdentityForCausalLM", "OwnPlusForCausalLM", "SharedForCausalLM", "SharedMoeForCausalLM"):
        assert [line[1] for line in lines if line[0] == cls] == SERVED


def test_text_matrix_counts_each_methods_findings_on_its_own_line(tmp_path):
    header, lines = _matrix(_scan(tmp_path, "--method", "all"))
    by = {(line[0], line[1]): line[-1] for line in lines}
    # the DFlash setter of identity.py is the one identity setter among four +1 DFlash setters
    # (FT007, a warning) and every capture loop records a layer's input, so b=L is never
    # captured (FT010, info): the EAGLE-3 line has only the latter
    assert by[("IdentityForCausalLM", "EAGLE-3")] == "1 info"
    assert by[("IdentityForCausalLM", "DFlash")] == "1 warning, 1 info"
    # WrapVL's DFlash setter hands the ids to a model without the method (FT003, a warning)
    assert "1 warning" in by[("WrapVLForConditionalGeneration", "DFlash")]


SHARED_DRAFT = '''"""A draft on SharedForCausalLM: it inherits both methods' setters, but its model consumes
the captured states (fc over their concatenation)."""

from sglang.srt.layers.base import Linear, Module, ModuleList, cat
from sglang.srt.models.shared import SharedForCausalLM


class SharedDraftModel(Module):
    def __init__(self, config):
        self.fc = Linear(config.hidden_size * 3, config.hidden_size, bias=False)
        self.layers = ModuleList([Module()])

    def forward(self, input_ids, aux_hidden_states):
        hidden_states = self.fc(cat(aux_hidden_states, dim=-1))
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states


class SharedForCausalLMDraft(SharedForCausalLM):
    def __init__(self, config):
        self.config = config
        self.model = SharedDraftModel(config)


EntryClass = [SharedForCausalLMDraft]
'''


def test_a_draft_gets_no_line_under_another_method(tmp_path):
    """A draft consumes the states under every method: one line (the JSON keeps each answer)."""
    import shutil

    tree = tmp_path / "engine"
    shutil.copytree(FIXTURE, tree, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    (tree / "sglang" / "srt" / "models" / "shared_draft.py").write_text(SHARED_DRAFT)
    run = CliRunner().invoke(main, ["scan", str(tree), "--no-cache", "-q", "--method", "all"])
    assert run.exit_code == 0, run.output
    header, lines = _matrix(run.output)
    drafts = [line for line in lines if line[0] == "SharedForCausalLMDraft"]
    assert [(line[1], line[header.index("support")]) for line in drafts] == [("EAGLE-3", "draft")]
    out = tmp_path / "scan.json"
    args = ["scan", str(tree), "--no-cache", "-q", "--method", "all", "--format", "json", "-o", str(out)]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    row = next(m for m in json.loads(out.read_text())["models"] if m["class"] == "SharedForCausalLMDraft")
    assert row["methods"]["dflash"]["category"] == "draft"
    assert [c for c, _ in _rows(render_html(json.loads(out.read_text())))].count("SharedForCausalLMDraft") == 1


def test_a_profile_with_one_method_shows_no_method_column(tmp_path):
    """rules/engines/tensorrt_llm.toml declares no [methods.*]: its one method is EAGLE-3, so
    --method all has no other answer to show (its findings still name the method)."""
    from fixture_paths import TRTLLM_LIKE

    run = CliRunner().invoke(main, ["scan", str(TRTLLM_LIKE), "--no-cache", "-q", "--method", "all"])
    assert run.exit_code == 0, run.output
    header, lines = _matrix(run.output)
    assert "method" not in header and lines
    out = tmp_path / "scan.json"
    args = ["scan", str(TRTLLM_LIKE), "--no-cache", "-q", "--method", "all", "--format", "json", "-o", str(out)]
    assert CliRunner().invoke(main, args).exit_code == 0
    doc = json.loads(out.read_text())
    assert [m["label"] for m in doc["method"]["served"]] == ["EAGLE-3"]
    assert doc["findings"] and all(f["message"].startswith("EAGLE-3: ") for f in doc["findings"])
    assert "matrix-method" not in render_html(doc)


def test_plain_text_matrix_has_no_method_column(tmp_path):
    header, lines = _matrix(_scan(tmp_path))
    assert header[:2] == ["class", "registered"]
    assert len(lines) == len({line[0] for line in lines})


# -- findings ---------------------------------------------------------------------------------


def test_every_methods_findings_name_their_method(all_doc, plain_doc):
    wrap_vl = MODELS / "wrap_vl.py"
    labels = {m["name"]: m["label"] for m in all_doc["method"]["served"]}
    for f in all_doc["findings"]:
        assert f["method"] in labels and f["message"].startswith(labels[f["method"]] + ": ")
    delegation = _line(wrap_vl, "def set_dflash_layers_to_capture")  # the setter that delegates
    def methods_at(rule: str, file: str, line: int) -> set[str]:
        found = all_doc["findings"]
        return {f["method"] for f in found if f["rule"] == rule and f["file"].endswith(file) and f["line"] == line}

    # EAGLE-3's delegation target defines its setter: only DFlash's (and DSpark's) delegation fails
    assert methods_at("FT003", "wrap_vl.py", delegation) == {"dflash", "dspark"}
    identity = _line(MODELS / "identity.py", "def set_dflash_layers_to_capture")
    assert methods_at("FT007", "identity.py", identity) == {"dflash", "dspark"}
    # the default method's findings are the plain scan's (same fingerprints: baselines hold)
    plain = {f["fingerprint"]: f["message"] for f in plain_doc["findings"]}
    own = {f["fingerprint"]: f["message"] for f in all_doc["findings"] if f["method"] == "eagle3"}
    assert own == {fp: f"EAGLE-3: {message}" for fp, message in plain.items()}
    assert all("method" not in f for f in plain_doc["findings"])


def test_findings_at_one_place_follow_the_served_order(all_doc):
    order = [m["name"] for m in all_doc["method"]["served"]]
    places: dict[tuple, list[str]] = {}
    for f in all_doc["findings"]:
        places.setdefault((f["file"], f["line"], f["rule"]), []).append(f["method"])
    assert any(len(methods) == 3 for methods in places.values())
    assert all(methods == sorted(methods, key=order.index) for methods in places.values())


# -- JSON -------------------------------------------------------------------------------------


def test_json_rows_carry_each_methods_answer_and_findings(all_doc):
    models = {m["class"]: m for m in all_doc["models"]}
    wrap = models["WrapVLForConditionalGeneration"]
    dflash = wrap["methods"]["dflash"]
    assert set(dflash) >= {"support", "category", "capture", "findings"}
    assert (dflash["support"], dflash["category"]) == ("broken", "broken")
    by_fp = {f["fingerprint"]: f for f in all_doc["findings"]}
    # each method's findings sit on that method's answer; the row's own are the default's
    assert any(by_fp[b["fingerprint"]]["rule"] == "FT003" for b in dflash["findings"])
    assert all(by_fp[b["fingerprint"]]["method"] == "dflash" for b in dflash["findings"])
    assert all(by_fp[b["fingerprint"]]["method"] == "eagle3" for m in all_doc["models"] for b in m["findings"])
    assert models["InnerTextModel"]["methods"] == {}  # no DFlash or DSpark setter: no other answer


def test_plain_json_rows_and_findings_are_unchanged_by_the_views(all_doc, plain_doc):
    """Without --method the rows are what --method all writes for the default method."""
    assert "method" not in plain_doc and all("methods" not in m for m in plain_doc["models"])
    keep = ("class", "qualname", "support", "category", "capture")
    def rows(doc: dict) -> list[dict]:
        return [{k: m.get(k) for k in keep} for m in doc["models"]]

    assert rows(plain_doc) == rows(all_doc)


# -- HTML -------------------------------------------------------------------------------------


def _rows(page: str) -> list[tuple[str, str]]:
    """(class, method) of each matrix line, from its class link and its data-method."""
    table = page[page.index('id="matrix-table"'):page.index("</table>", page.index('id="matrix-table"'))]
    out = []
    for tr in re.findall(r"<tr data-model=.*?</tr>", table, re.S):
        method = re.search(r'data-method="([^"]*)"', tr)
        cls = re.search(r'class="model-link"[^>]*>(.*?)</a>', tr)
        assert cls is not None
        out.append((re.sub(r"<[^>]+>", "", cls.group(1)), method.group(1) if method else ""))
    return out


def test_html_report_has_a_line_per_method_and_method_filters(all_doc, tmp_path):
    page = render_html(all_doc)
    rows = _rows(page)
    assert [m for c, m in rows if c == "IdentityForCausalLM"] == SERVED
    assert [m for c, m in rows if c == "InnerTextModel"] == ["EAGLE-3"]
    assert 'id="matrix-method"' in page and 'id="finding-method"' in page
    assert f"{len(rows)} of {len(rows)} lines" in page
    # every finding names its method; the class view lists the other methods' answers
    findings = re.findall(r'<li class="finding [^>]*>', page)
    assert len(findings) == len(all_doc["findings"]) and all('data-method="' in li for li in findings)
    wrap = page[page.index('id="model-sglang.srt.models.wrap_vl.WrapVLForConditionalGeneration"'):]
    wrap = wrap[:wrap.index("</article>")]
    assert "Under the other methods (2)" in wrap and 'data-method="DFlash"' in wrap
    # `flowtrace report --scan` renders the saved document the same way
    saved = tmp_path / "scan.json"
    saved.write_text(json.dumps(all_doc))
    out = tmp_path / "report.html"
    run = CliRunner().invoke(main, ["report", "--scan", str(saved), "-o", str(out)])
    assert run.exit_code == 0, run.output
    assert _rows(out.read_text()) == rows


def test_plain_html_report_has_no_method_views(plain_doc):
    page = render_html(plain_doc)
    assert "data-method=" not in page and "matrix-method" not in page and "finding-method" not in page
    assert page.count("<script>") == 1  # the method filters' script only on a --method all page
