"""One set of categories in every output (issue 27): the text matrix, the scan JSON and the HTML
report name each row the same way and count the same, and a broken row shows its finding.

lmdeploy_like's qwen3_dflash-style draft (tests/fixtures/engines/lmdeploy_like) owns the fc over
the concatenated states: a draft, not a broken target. sglang_like's LambdaForCausalLM captures
through LambdaModel, whose forward drops the capture: the FT005 finding sits on LambdaModel
(the class to fix) and the broken LambdaForCausalLM row shows it.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from click.testing import CliRunner

from fixture_paths import FIXTURES as ENGINES
from flowtrace.cli import main


def _scan(tmp_path, engine: str):
    tree = ENGINES / engine
    html = tmp_path / f"{engine}.html"
    res = CliRunner().invoke(main, ["scan", str(tree), "--format", "json", "--no-cache", "--html", str(html)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    text = CliRunner().invoke(main, ["scan", str(tree), "--no-cache", "--matrix"])
    assert text.exit_code == 0, text.output
    return doc, text.stdout, html.read_text(encoding="utf-8"), text.stderr


def _text_categories(text: str) -> dict[str, str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("class "))
    out = {}
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line)
        out[cells[0]] = cells[2]
    return out


@pytest.mark.parametrize("engine", ["sglang_like", "lmdeploy_like"])
def test_text_json_and_html_show_the_same_category_and_counts(tmp_path, engine):
    doc, text, html, summary = _scan(tmp_path, engine)
    json_kinds = {m["class"]: m["category"] for m in doc["models"]}
    assert _text_categories(text) == json_kinds
    html_kinds = Counter(re.findall(r'<tr data-model="[^"]+"[^>]*data-support="(\w+)"', html))
    assert html_kinds == Counter(json_kinds.values())
    capturing = sum(1 for k in json_kinds.values() if k in {"supported", "inherited", "delegated", "conditional"})
    assert f"{len(json_kinds)} model classes ({capturing} can capture)" in summary


def test_a_draft_is_a_draft_everywhere(tmp_path):
    doc, text, html, _ = _scan(tmp_path, "lmdeploy_like")
    drafts = [m for m in doc["models"] if m["draft"]]
    assert drafts and all(m["category"] == "draft" for m in drafts)
    assert all(_text_categories(text)[m["class"]] == "draft" for m in drafts)


def test_every_broken_row_of_the_report_shows_a_finding(tmp_path):
    _, _, html, _ = _scan(tmp_path, "sglang_like")
    rows = re.findall(r'<tr data-model="model-([^"]+)"[^>]*data-findings="(\d+)" data-support="(\w+)"', html)
    broken = {q: int(n) for q, n, kind in rows if kind == "broken"}
    assert "sglang.srt.models.lambda_model.LambdaForCausalLM" in broken
    assert all(n > 0 for n in broken.values()), broken


# A multi-token-prediction head in the shape of SGLang's DeepseekV3ForCausalLMNextN: it inherits
# the capturing wrapper's setter, but the model it builds is a one-layer head that projects
# [embedding, target hidden state] through ``eh_proj`` and never captures. Written for this test
# beside shapes_like's own NextNForCausalLM (same shape without a projection).
_EH_HEAD = """\
from sglang.srt.layers.base import Module
from sglang.srt.models.base_lm import BaseDecoderLayer, BaseForCausalLM


class Linear(Module):
    def __init__(self, n_in, n_out, bias=False):
        self.n_in, self.n_out = n_in, n_out


class EhModelNextN(Module):
    def __init__(self, config):
        self.config = config
        self.eh_proj = Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.decoder = BaseDecoderLayer()

    def forward(self, input_ids, hidden_states):
        hidden_states, _ = self.decoder(hidden_states, None)
        return hidden_states


class EhForCausalLMNextN(BaseForCausalLM):
    def __init__(self, config):
        self.config = config
        self.model = EhModelNextN(config)
        self.capture_aux_hidden_states = False


class EhSubclassNextN(EhForCausalLMNextN):
    pass


class EhLookalike(BaseForCausalLM):
    def __init__(self, config):
        self.config = config
        self.model = EhModelNextN(config)
        self.capture_aux_hidden_states = False


EntryClass = [EhForCausalLMNextN, EhSubclassNextN, EhLookalike]
"""


def test_a_draft_head_is_a_draft_by_its_name_and_its_projection(tmp_path):
    import shutil

    from flowtrace.analysis.categories import categories
    from flowtrace.analysis.scan import scan
    from flowtrace.api import findings

    tree = tmp_path / "shapes_like"
    shutil.copytree(ENGINES / "shapes_like", tree)
    (tree / "sglang" / "srt" / "models" / "eh_head.py").write_text(_EH_HEAD, encoding="utf-8")
    result = scan(tree, profile="sglang")
    kinds = {q.rsplit(".", 1)[-1]: k for q, k in categories(result).items()}
    support = {r.name: r.support for r in result.rows}
    # The capture verdict stays what the chain says; the category calls the head a draft.
    assert support["EhForCausalLMNextN"] == "broken"
    assert kinds["EhForCausalLMNextN"] == "draft"
    assert kinds["EhSubclassNextN"] == "draft"  # a subclass of a draft
    # Name without projection (shapes_like's NextNForCausalLM) or projection without a draft
    # name (EhLookalike): not enough, the row keeps its capture verdict.
    assert kinds["NextNForCausalLM"] == "broken"
    assert kinds["EhLookalike"] == "broken"
    # `check` speaks about targets only: no finding on a draft, as the report shows it.
    symbols = {f.symbol.rsplit(".", 1)[-1] for f in findings(result)}
    assert not symbols & {"EhForCausalLMNextN", "EhSubclassNextN"}
