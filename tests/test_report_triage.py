"""The report leads with what breaks: the founding story's rows are named, counted and never green.

The founding story in the sglang-like fixture: ``GammaForCausalLM.set_eagle3_layers_to_capture``
(gamma.py:53) adds one only when the first id is 1, so a draft naming the embedding as id -1
reaches no boundary (FT009) and the transform differs from the engine's majority (FT007): one
error at the setter, graded against the founding story's draft (DRAFTS below: SpecForge ids
[-1, 2, 30], trained on cat([embedding, layer 3, layer 31]) of a 32-layer target). Its rows are GammaForCausalLM
(defines it), ``GammaV3ForCausalLM`` written
below (inherits it, as DeepseekV3ForCausalLM inherits DeepseekV2ForCausalLM's) and
OmegaVLForConditionalGeneration (omega_vl.py: delegates to a GammaForCausalLM, as
KimiK25ForConditionalGeneration delegates to a DeepseekV3ForCausalLM). Before, only the first
of them showed the finding: the others were green "inherited" / "delegated" rows with 0
findings, and the report listed 26 info cards before the first error.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from fixture_paths import SGLANG_LIKE
from test_html_report import by_id, parse, rows_by_model

GAMMA_V3 = '''\
"""The founding story's inherited row: a registered subclass using its base's setter."""

from sglang.srt.models.gamma import GammaForCausalLM


class GammaV3ForCausalLM(GammaForCausalLM):
    pass


EntryClass = GammaV3ForCausalLM
'''

# The founding story's draft, as a catalogue entry (docs/drafts.md) for the fixture's family.
DRAFTS = """\
[family]
name = "Gamma"

[[draft]]
name = "founding-story/gamma-eagle3"
target = "gamma-32l"
architectures = ["GammaForCausalLM", "GammaV3ForCausalLM", "OmegaVLForConditionalGeneration"]
num_hidden_layers = 32
trainer = "SpecForge"
convention = "specforge"
key = "eagle_config.eagle_aux_hidden_state_layer_ids"
ids = [-1, 2, 30]
target_hidden_size = 64
source = "the founding story: a draft trained on cat([embed_output, layer3, layer31])"
"""

GAMMA = "sglang.srt.models.gamma.GammaForCausalLM"
GAMMA_V3_ROW = "sglang.srt.models.gamma_v3.GammaV3ForCausalLM"
OMEGA = "sglang.srt.models.omega_vl.OmegaVLForConditionalGeneration"
FOUNDING_ROWS = (GAMMA, GAMMA_V3_ROW, OMEGA)


def founding_tree(tmp: Path) -> Path:
    """A copy of the sglang-like fixture with the founding story's inherited row added, and the
    founding story's draft in a catalogue file beside it (``founding_drafts(tree)``)."""
    root = tmp / "engine"
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    (root / "sglang/srt/models/gamma_v3.py").write_text(GAMMA_V3, encoding="utf-8")
    founding_drafts(root).write_text(DRAFTS, encoding="utf-8")
    return root


def founding_drafts(tree: Path) -> Path:
    return tree.parent / "drafts.toml"


def founding_document(tmp: Path) -> dict:
    from flowtrace import api
    from flowtrace.index.build import IndexOptions
    from flowtrace.render.report_data import report_document

    tree = founding_tree(tmp)
    result = api.scan(tree, options=IndexOptions(use_cache=False, jobs=1), drafts_files=(founding_drafts(tree),))
    return report_document(result, api.findings(result))


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> dict:
    return founding_document(tmp_path_factory.mktemp("founding"))


def _the_error(doc: dict) -> dict:
    [found] = [f for f in doc["findings"] if f["rule"] == "FT007" and f["file"].endswith("models/gamma.py")]
    return found


def test_the_setter_error_names_every_row_it_reaches(doc):
    found = _the_error(doc)
    # the draft gets 2 states instead of 3 (id -1 reaches no boundary): its fc, sized for 3
    # states, raises in the first draft forward; never silent, the count differs
    assert (found["severity"], found["consequence"]) == ("error", "crash_serving")
    assert found["symbol"] == f"{GAMMA}.set_eagle3_layers_to_capture"
    # FT009, merged into it, grouped the three registered targets running that setter
    assert set(found["affects"]) == set(FOUNDING_ROWS)


def test_each_json_row_lists_the_findings_that_concern_it(doc):
    rows = {m["qualname"]: m for m in doc["models"]}
    fingerprint = _the_error(doc)["fingerprint"]
    for qualname in FOUNDING_ROWS:
        listed = [f for f in rows[qualname]["findings"] if f["fingerprint"] == fingerprint]
        assert listed == [
            {
                "rule": "FT007",
                "kind": "transform_inconsistent",
                "severity": "error",
                "consequence": "crash_serving",
                "fingerprint": fingerprint,
            }
        ], qualname
    # the support words stay what the capture analysis says; the findings are beside them
    assert (rows[GAMMA]["support"], rows[GAMMA_V3_ROW]["support"], rows[OMEGA]["support"]) == (
        "supported",
        "inherited",
        "delegated",
    )
    # a row no finding concerns says so with an empty list, not a missing member
    assert all(isinstance(m["findings"], list) for m in doc["models"])


def test_the_page_starts_with_the_errors_and_their_rows(doc):
    from flowtrace.render.html import render_html

    tb = parse(render_html(doc))
    ids = by_id(tb)
    cards = [n for n in ids["start-here"].walk() if n.tag == "li" and "card" in n.attrs.get("class", "")]
    severities = [c.attrs["data-severity"] for c in cards]
    assert severities and set(severities) <= {"error", "warning"}
    assert severities == sorted(severities, key=["error", "warning"].index), "errors first, then warnings"
    [card] = [c for c in cards if "models/gamma.py:53" in c.text()]
    chips = [a.text().strip() for a in card.walk() if a.tag == "a" and "row-chip" in a.attrs.get("class", "")]
    assert chips == ["GammaForCausalLM", "GammaV3ForCausalLM", "OmegaVLForConditionalGeneration"]
    # the section comes before the matrix in the page
    order = [n.attrs.get("id") for n in tb.root.walk() if n.tag == "section"]
    assert order.index("start-here") < order.index("matrix") < order.index("findings")


def test_a_row_an_error_names_is_never_green_and_shows_the_count(doc):
    from flowtrace.render.html import build_context, render_html

    tb = parse(render_html(doc))
    rows = rows_by_model(tb)
    models = {m.qualname: m for m in build_context(doc)["models"]}
    for qualname in FOUNDING_ROWS:
        m = models[qualname]
        row = rows[m.id]
        assert row.attrs.get("class") == "flag-error" and "error" in row.attrs["data-severities"].split()
        badge = next(n for n in row.walk() if n.tag == "span" and "badge" in n.attrs.get("class", "").split())
        assert "flagged" in badge.attrs["class"] and "sev-error" in badge.attrs["class"], badge.attrs
        count = next(n for n in row.walk() if "flag-count" in n.attrs.get("class", ""))
        assert re.fullmatch(r"\d+ errors?", count.text().strip()), count.text()
        assert int(row.attrs["data-findings"]) >= 1
        # the class view lists the finding
        article = by_id(tb)[m.id]
        assert "FT007" in article.text() and "Findings on this class" in article.text()


def test_the_findings_are_grouped_errors_first(doc):
    from flowtrace.render.html import build_context

    groups = build_context(doc)["groups"]
    ranks = [["error", "warning", "info"].index(g.severity) for g in groups]
    assert ranks == sorted(ranks)


def test_json_rows_and_html_rows_agree(doc):
    """The matrix's finding count of every row is its JSON row's ``findings`` (one decision)."""
    from flowtrace.render.html import build_context

    by_qualname = {m["qualname"]: m for m in doc["models"]}
    for m in build_context(doc)["models"]:
        assert sorted(f.fingerprint for f in m.findings) == sorted(
            f["fingerprint"] for f in by_qualname[m.qualname]["findings"]
        ), m.qualname


def test_scan_json_on_the_command_line_carries_the_row_findings(tmp_path):
    from click.testing import CliRunner

    from flowtrace.cli.main import main

    tree = founding_tree(tmp_path)
    res = CliRunner().invoke(
        main,
        ["scan", str(tree), "--no-cache", "--jobs", "1", "--format", "json", "--drafts", str(founding_drafts(tree))],
    )
    assert res.exit_code == 0, res.output
    rows = {m["qualname"]: m for m in json.loads(res.stdout)["models"]}
    assert {"FT007"} <= {f["rule"] for f in rows[GAMMA_V3_ROW]["findings"] if f["severity"] == "error"}


def test_the_text_matrix_counts_the_findings_of_each_row(tmp_path):
    from click.testing import CliRunner

    from flowtrace.cli.main import main

    tree = founding_tree(tmp_path)
    res = CliRunner().invoke(
        main, ["scan", str(tree), "--no-cache", "--jobs", "1", "--drafts", str(founding_drafts(tree))]
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[2].split()[-1] == "findings"  # the header's last column
    for name in ("GammaForCausalLM", "GammaV3ForCausalLM", "OmegaVLForConditionalGeneration"):
        row = next(line for line in lines if line.startswith(name + " "))
        assert "1 error" in row, row
