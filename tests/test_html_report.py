"""Structural tests of the HTML report: content, anchors, escaping, links, determinism.

The report is parsed with the stdlib HTML parser and checked as a tree, not by grepping
markup, so a hostile string that became live markup (an element, an attribute, a second
script) is caught as such. ``sample_doc`` exercises every optional key and is reused by the
browser test.
"""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from flowtrace.render import html as report
from flowtrace.render.html import render_html

import example_report

REPO = Path(__file__).resolve().parents[1]
HOSTILE = "</script><script>alert(1)</script>"
HOSTILE_PWN = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'
HOSTILE_FILE = 'sglang/srt/models/"><svg onload=window.__pwned=1>.py'


# ---------------------------------------------------------------------------------------------
# sample documents


def sample_doc() -> dict[str, Any]:
    """A hand-written flowtrace.scan/1 doc with every optional key and hostile strings in the
    places scanned code can reach: class names, paths, expressions, messages, labels, sources."""
    alpha = "pkg.models.alpha.AlphaForCausalLM"
    evil = f"pkg.models.evil.{HOSTILE}"
    deleg = "pkg.models.vl.VLForConditionalGeneration"
    plain = "pkg.models.plain.PlainForCausalLM"

    def capture(
        setter_q: str, file: str, transform: str, point: str, expr: str, problems: list[str] | None = None
    ) -> dict[str, Any]:
        return {
            "setter": {"qualname": setter_q, "file": file, "line": 40, "inherited": False},
            "id_transform": transform,
            "transform_note": None,
            "delegates_to": None,
            "default_layers": "[2, num_layers // 2, num_layers - 3]",
            "capture_site": {
                "qualname": setter_q.rsplit(".", 2)[0] + "Model.forward",
                "file": file,
                "line": 12,
                "mechanism": "append",
                "point": point,
                "note": "aux_hidden_states.append(...) before layer i runs",
                "loop_range": "range(self.start_layer, self.end_layer)",
                "attribute": "layers_to_capture",
                "captured_expression": expr,
            },
            "embedding_capturable": True,
            "last_layer_capturable": False,
            "effective_transform": transform,
            "holder": setter_q.rsplit(".", 2)[0] + "Model",
            "pp_guard": True,
            "problems": problems or [],
        }

    models = [
        {
            "class": "AlphaForCausalLM",
            "qualname": alpha,
            "file": "pkg/models/alpha.py",
            "line": 30,
            "registered": True,
            "architectures": ["AlphaForCausalLM"],
            "support": "supported",
            "capture": capture(
                f"{alpha}.set_eagle3_layers_to_capture",
                "pkg/models/alpha.py",
                "plus_one",
                "input",
                "hidden_states + residual",
            ),
        },
        {
            "class": HOSTILE,
            "qualname": evil,
            "file": HOSTILE_FILE,
            "line": 7,
            "registered": True,
            "architectures": [HOSTILE_PWN],
            "support": "broken",
            "capture": capture(
                f"{evil}.set_eagle3_layers_to_capture",
                HOSTILE_FILE,
                "identity",
                "output",
                HOSTILE_PWN,
                problems=[HOSTILE],
            ),
        },
        {
            "class": "VLForConditionalGeneration",
            "qualname": deleg,
            "file": "pkg/models/vl.py",
            "line": 5,
            "registered": True,
            "architectures": ["VLForConditionalGeneration"],
            "support": "delegated",
            "capture": {
                **capture(
                    f"{deleg}.set_eagle3_layers_to_capture", "pkg/models/vl.py", "delegates", "input", "hidden_states"
                ),
                "delegates_to": "language_model",
                "effective_transform": "plus_one",
            },
        },
        {
            "class": "PlainForCausalLM",
            "qualname": plain,
            "file": "pkg/models/plain.py",
            "line": 3,
            "registered": False,
            "architectures": [],
            "support": "none",
            "capture": None,
        },
    ]
    findings = [
        {
            "rule": "FT003",
            "name": "inconsistent-conventions",
            "severity": "warning",
            "file": "pkg/models/vl.py",
            "line": 9,
            "message": "delegation changes the transform",
            "symbol": deleg,
            "fingerprint": "c3",
        },
        {
            "rule": "FT003",
            "name": "inconsistent-conventions",
            "severity": "warning",
            "file": "pkg/models/alpha.py",
            "line": 41,
            "message": "plus_one here, identity elsewhere",
            "symbol": f"{alpha}.set_eagle3_layers_to_capture",
            "fingerprint": "a1",
        },
        {
            "rule": "FT003",
            "name": "inconsistent-conventions",
            "severity": "warning",
            "file": HOSTILE_FILE,
            "line": 7,
            "message": HOSTILE_PWN,
            "symbol": evil,
            "fingerprint": "b2",
        },
        {
            "rule": "FT001",
            "name": "missing-capture",
            "severity": "error",
            "file": "pkg/models/plain.py",
            "line": 3,
            "message": f"no setter {HOSTILE}",
            "symbol": plain,
            "fingerprint": "d4",
        },
        {
            "rule": "FT010",
            "name": "unreachable-last-layer",
            "severity": "info",
            "file": "pkg/other.py",
            "line": 1,
            "message": "not tied to a model",
            "symbol": None,
            "fingerprint": "e5",
        },
    ]
    graph = {
        "directed": True,
        "multigraph": True,
        "graph": {},
        "nodes": [
            {
                "id": "config:eagle_aux_hidden_state_layer_ids",
                "kind": "config",
                "label": "eagle_aux_hidden_state_layer_ids",
                "file": "",
                "line": 0,
                "model": "",
            },
            {
                "id": f"model:{alpha}",
                "kind": "model",
                "label": "AlphaForCausalLM",
                "file": "pkg/models/alpha.py",
                "line": 30,
                "model": alpha,
            },
            {
                "id": "setter:alpha",
                "kind": "setter",
                "label": "AlphaForCausalLM.set_eagle3_layers_to_capture",
                "file": "pkg/models/alpha.py",
                "line": 40,
                "model": "",
            },
            {
                "id": "attribute:alpha",
                "kind": "attribute",
                "label": "AlphaModel.layers_to_capture",
                "file": "pkg/models/alpha.py",
                "line": 12,
                "model": "",
            },
            {
                "id": "loop:alpha",
                "kind": "loop",
                "label": "AlphaModel.forward (append)",
                "file": "pkg/models/alpha.py",
                "line": 12,
                "model": "",
            },
            {
                "id": "concat:draft",
                "kind": "concat",
                "label": "cat(aux_hidden_states, dim=-1)",
                "file": "pkg/draft.py",
                "line": 20,
                "model": "",
            },
            {
                "id": "fc:draft",
                "kind": "fc",
                "label": "Eagle3Draft.fc in=3*H",
                "file": "pkg/draft.py",
                "line": 8,
                "model": "",
            },
            {"id": f"model:{evil}", "kind": "model", "label": HOSTILE, "file": HOSTILE_FILE, "line": 7, "model": evil},
            {
                "id": "setter:evil",
                "kind": "setter",
                "label": HOSTILE_PWN,
                "file": HOSTILE_FILE,
                "line": 40,
                "model": "",
            },
        ],
        "links": [
            {
                "source": "config:eagle_aux_hidden_state_layer_ids",
                "target": "setter:alpha",
                "label": "ids",
                "model": alpha,
                "key": 0,
            },
            {"source": f"model:{alpha}", "target": "setter:alpha", "label": "defines", "model": alpha, "key": 0},
            {"source": "setter:alpha", "target": "attribute:alpha", "label": "plus_one", "model": alpha, "key": 0},
            {"source": "attribute:alpha", "target": "loop:alpha", "label": "point: input", "model": alpha, "key": 0},
            {"source": "loop:alpha", "target": "concat:draft", "label": "concatenated", "model": alpha, "key": 0},
            {"source": "concat:draft", "target": "fc:draft", "label": "fc input", "key": 0},
            {
                "source": "config:eagle_aux_hidden_state_layer_ids",
                "target": "setter:evil",
                "label": HOSTILE,
                "model": evil,
                "key": 0,
            },
            {"source": f"model:{evil}", "target": "setter:evil", "label": "defines", "model": evil, "key": 0},
        ],
    }
    return {
        "schema": "flowtrace.scan/1",
        "tool": {"name": "flowtrace", "version": "0.0-test"},
        "root": "/src/engine",
        "profiles": ["sglang"],
        "stats": {
            "files_total": 10,
            "files_parsed": 6,
            "parse_errors": 1,
            "seconds": 0.5,
            "files_skipped": 4,
            "files_from_cache": 0,
        },
        "models": models,
        "capture_modes": [{"file": "pkg/spec.py", "line": 3, "mode": "FULL", "function": "init"}],
        "concat_sites": [
            {"file": "pkg/draft.py", "line": 20, "expression": f"cat({HOSTILE}, dim=-1)", "function": "forward"}
        ],
        "diagnostics": [{"file": HOSTILE_FILE, "line": 2, "kind": "parse-error", "reason": HOSTILE_PWN}],
        "findings": findings,
        "rules": {
            "FT001": {
                "name": "missing-capture",
                "severity": "error",
                "summary": "A registered class cannot capture.",
                "rationale": "EAGLE-3 silently gets nothing.",
                "fix": "Add a setter.",
            },
            "FT003": {
                "name": "inconsistent-conventions",
                "severity": "warning",
                "summary": f"Conventions differ {HOSTILE}",
                "rationale": "Off-by-one layouts.",
                "fix": "Pick one.",
            },
        },
        "paths": {
            alpha: [
                {"kind": "config", "label": "eagle_aux_hidden_state_layer_ids", "file": None, "line": None},
                {
                    "kind": "setter",
                    "label": "set_eagle3_layers_to_capture: val + 1",
                    "file": "pkg/models/alpha.py",
                    "line": 40,
                },
                {
                    "kind": "attribute",
                    "label": "self.model.layers_to_capture",
                    "file": "pkg/models/alpha.py",
                    "line": 44,
                },
                {
                    "kind": "loop",
                    "label": "for i in range(start, end): before layer i",
                    "file": "pkg/models/alpha.py",
                    "line": 12,
                },
                {"kind": "concat", "label": "cat(aux, -1)", "file": "pkg/draft.py", "line": 20},
                {"kind": "fc", "label": "fc(3 * H -> H)", "file": "pkg/draft.py", "line": 8},
            ],
            evil: [{"kind": "setter", "label": HOSTILE_PWN, "file": HOSTILE_FILE, "line": 40}],
        },
        "examples": {
            alpha: {
                "num_layers": 32,
                "layer_ids": [-1, 2, 30],
                "boundaries": [0, 3, 31],
                "note": "ids + 1, captured before layer i",
            },
            evil: {"num_layers": 8, "layer_ids": [1, 9], "boundaries": [2, 10], "note": HOSTILE},
            deleg: {"num_layers": 32, "layer_ids": None, "boundaries": None, "note": "delegate not resolved"},
        },
        "graph": graph,
        "sources": {
            "pkg/models/alpha.py": [f"line {i}" for i in range(1, 60)],
            HOSTILE_FILE: {"start": 5, "lines": ["a = 1", "b = 2", HOSTILE_PWN, "c = 3"]},
            "pkg/models/plain.py": {"1": "import x", "3": "class PlainForCausalLM:"},
        },
    }


def capture_probe(model: str, verdict: str = "refuted") -> dict[str, Any]:
    return {
        "schema": "flowtrace.probe/1",
        "command": "capture",
        "target": {
            "name": "tiny-alpha",
            "source": "factory",
            "num_layers": 32,
            "hidden_size": 64,
            "vocab_size": 128,
            "embed_module": "embed",
            "layers_module": "layers",
            "parameters": 1000,
        },
        "device": "cpu",
        "dtype": "float32",
        "execution": "eager",
        "timings": {"build": 0.1},
        "boundaries": [0, 3, 30],
        "primary_observation": 0,
        "observations": [],
        "claim": {"source": "--expect", "model": model, "boundaries": [0, 3, 31]},
        "slots": [
            {"slot": 0, "expected": 0, "observed": 0, "verdict": "confirmed", "evidence": "exact"},
            {
                "slot": 2,
                "expected": 31,
                "observed": 30,
                "verdict": "refuted",
                "evidence": f"exact match of b=30 {HOSTILE}",
            },
        ],
        "verdict": verdict,
        "exit_code": 1,
        "warnings": [HOSTILE_PWN],
    }


# ---------------------------------------------------------------------------------------------
# a tiny DOM from html.parser


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.walk()

    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())


VOID = {"meta", "link", "br", "hr", "img", "input", "area", "base", "col", "embed", "source", "track", "wbr"}
SVG_SELF = {"path", "polygon", "rect", "circle", "line", "stop"}


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root
        self.starttags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        d = dict(attrs)
        assert len(d) == len(attrs), f"duplicate attribute in <{tag}>"
        self.starttags.append((tag, d))
        node = Node(tag, d, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.starttags.append((tag, dict(attrs)))
        self.cur.children.append(Node(tag, dict(attrs), self.cur))

    def handle_endtag(self, tag):
        node = self.cur
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"stray </{tag}>"
        self.cur = node.parent

    def handle_data(self, data):
        self.cur.children.append(data)


DRAFT_MODEL = '''"""An EAGLE-3 draft: inherits AlphaForCausalLM's capture setter, but its model consumes the
captured states (fc over their concatenation) and runs layers that capture nothing."""

from sglang.srt.layers.base import Linear, Module, ModuleList, cat
from sglang.srt.models.alpha import AlphaForCausalLM


class AlphaEagle3Model(Module):
    def __init__(self, config):
        self.fc = Linear(config.hidden_size * 3, config.hidden_size, bias=False)
        self.layers = ModuleList([Module()])

    def forward(self, input_ids, aux_hidden_states):
        hidden_states = self.fc(cat(aux_hidden_states, dim=-1))
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states


class AlphaForCausalLMEagle3(AlphaForCausalLM):
    def __init__(self, config):
        self.config = config
        self.model = AlphaEagle3Model(config)


EntryClass = [AlphaForCausalLMEagle3]
'''


def add_draft_model(tree: Path) -> Path:
    """Write the draft model above into a copy of the sglang-like fixture."""
    path = tree / "sglang" / "srt" / "models" / "alpha_eagle3.py"
    path.write_text(DRAFT_MODEL, encoding="utf-8")
    return path


def parse(text: str) -> TreeBuilder:
    tb = TreeBuilder()
    tb.feed(text)
    tb.close()
    return tb


def by_id(tb: TreeBuilder) -> dict[str, Node]:
    return {n.attrs["id"]: n for n in tb.root.walk() if n.attrs.get("id")}


def rows_by_model(tb: TreeBuilder) -> dict[str, Node]:
    return {n.attrs["data-model"]: n for n in tb.root.walk() if n.tag == "tr" and n.attrs.get("data-model")}


def data_block(tb: TreeBuilder) -> dict[str, Any]:
    node = by_id(tb)["flowtrace-data"]
    assert node.tag == "script" and node.attrs.get("type") == "application/json"
    return json.loads(node.text())


# ---------------------------------------------------------------------------------------------
# invariants every report must satisfy


def csp_hash(text: str) -> str:
    import base64
    import hashlib

    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def check_report(text: str, doc: dict[str, Any], *, link_prefix: str = "vscode://file/") -> TreeBuilder:
    tb = parse(text)
    assert text.startswith("<!DOCTYPE html>")

    # unique ids, and every in-page link resolves
    ids = [t[1]["id"] for t in tb.starttags if t[1].get("id")]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, f"duplicate ids: {dupes[:5]}"
    idset = set(ids)
    for tag, attrs in tb.starttags:
        assert "src" not in attrs, f"<{tag} src=...> would load a resource"
        assert not any(k.startswith("on") for k in attrs), f"event handler attribute on <{tag}>: {attrs}"
        href = attrs.get("href")
        if href is None:
            continue
        if href.startswith("#"):
            assert href[1:] in idset, f"dangling in-page link {href}"
        else:
            assert href.startswith(link_prefix), f"unexpected URL {href!r}"
    # exactly our two scripts, no other active or embedding elements
    scripts = [a for t, a in tb.starttags if t == "script"]
    assert len(scripts) == 2 and scripts[0] == {"type": "application/json", "id": "flowtrace-data"} and scripts[1] == {}
    assert not {t for t, _ in tb.starttags} & {
        "img",
        "iframe",
        "object",
        "embed",
        "link",
        "base",
        "form",
        "video",
        "audio",
    }
    # the CSP pins our one style and one script by hash and allows nothing else
    csp = next(
        a["content"] for t, a in tb.starttags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    )
    assert "default-src 'none'" in csp
    script_text = next(n.text() for n in tb.root.walk() if n.tag == "script" and not n.attrs)
    style_text = next(n.text() for n in tb.root.walk() if n.tag == "style")
    assert f"script-src {csp_hash(script_text)};" in csp and f"style-src {csp_hash(style_text)};" in csp
    assert not any("style" in a for _, a in tb.starttags), "inline style attributes would be blocked by the CSP"
    style = "".join(n.text() for n in tb.root.walk() if n.tag == "style")
    assert "url(" not in style and "@import" not in style
    assert not re.search(r"https?://", "".join(n.text() for n in tb.root.walk() if n.tag == "script" and not n.attrs))

    # the embedded data is the doc (less the bulky keys) and survives escaping intact
    data = data_block(tb)
    assert data["doc"] == json.loads(json.dumps({k: v for k, v in doc.items() if k not in report.RENDER_ONLY_KEYS}))

    # every model: a matrix row and a detail article, named in the text
    rows = rows_by_model(tb)
    articles = {n.attrs["id"]: n for n in tb.root.walk() if "model-detail" in n.classes()}
    assert len(rows) == len(doc["models"]) == len(articles)
    assert set(rows) == set(articles)
    row_text = {m: r.text() for m, r in rows.items()}
    for m in doc["models"]:
        assert any(m["class"] in t for t in row_text.values()), m["class"]
    # every finding, once, with its message as text
    items = [n for n in tb.root.walk() if "finding" in n.classes() and n.tag == "li"]
    assert len(items) == len(doc["findings"])
    texts = [n.text() for n in items]
    for f in doc["findings"]:
        assert sum(f["message"] in t for t in texts) >= 1, f["message"]
    assert data["ui"]["findings"] == [n.attrs["id"] for n in items]
    return tb


# ---------------------------------------------------------------------------------------------
# fixture engines


@pytest.fixture(scope="module")
def fixture_docs(sglang_scan, vllm_scan) -> dict[str, dict[str, Any]]:
    from flowtrace import api
    from flowtrace.render.scan_json import scan_document

    return {
        name: scan_document(r, api.findings(r)) for name, r in (("sglang_like", sglang_scan), ("vllm_like", vllm_scan))
    }


@pytest.mark.parametrize("name", ["sglang_like", "vllm_like"])
def test_fixture_engine_report(fixture_docs, name):
    doc = fixture_docs[name]
    assert doc["models"] and doc["findings"], "the fixture engines should yield models and findings"
    text = render_html(doc)
    tb = check_report(text, doc)
    ids = by_id(tb)
    # anchors FT###-n count 1..n within each rule, in (file, line) order
    for rule in {f["rule"] for f in doc["findings"]}:
        mine = sorted(
            (f for f in doc["findings"] if f["rule"] == rule), key=lambda f: (f["file"], f["line"], f["fingerprint"])
        )
        for i, f in enumerate(mine, 1):
            node = ids[f"{rule}-{i}"]
            assert f["message"] in node.text()
            assert f"{f['file']}:{f['line']}" in node.text()
    # the header counts
    header = ids["summary"].text()
    assert f"{doc['stats']['files_total']} scanned" in header
    for sev in ("error", "warning", "info"):
        n = sum(f["severity"] == sev for f in doc["findings"])
        assert f"{n} {sev}" in header


def test_fixture_report_document(sglang_scan):
    """The document api.html_report renders: paths, examples, graph, rules, snippets included."""
    from flowtrace import api
    from flowtrace.render.report_data import report_document

    doc = report_document(sglang_scan, api.findings(sglang_scan))
    text = render_html(doc)
    tb = check_report(text, doc)
    ids = by_id(tb)
    svgs = [n for n in tb.root.walk() if n.tag == "svg" and "graph" in n.classes()]
    capturing = [m for m in doc["models"] if m["capture"] is not None]
    assert len(svgs) >= len(capturing)
    alpha = ids["model-sglang.srt.models.alpha.AlphaForCausalLM"]
    labels = alpha.text()
    assert "AlphaModel.layers_to_capture" in labels and "point: input" in labels
    assert [n for n in alpha.walk() if "step" in n.classes()], "capture path steps"
    assert "reach the draft as [b=" in labels or "no resolvable layout" in labels
    # snippets: at most one highlighted line per finding, and most findings have one
    finding_ids = data_block(tb)["ui"]["findings"]
    hits = {fid: [n for n in ids[fid].walk() if "hit" in n.classes()] for fid in finding_ids}
    assert all(len(h) <= 1 for h in hits.values())
    assert sum(1 for h in hits.values() if h) >= len(finding_ids) // 2
    for code in {f["rule"] for f in doc["findings"]}:
        assert doc["rules"][code]["summary"] in ids[f"rule-{code}"].text()


# ---------------------------------------------------------------------------------------------
# sample doc: optional keys, hostile strings


def test_sample_doc_structure():
    doc = sample_doc()
    text = render_html(doc, title="sample")
    tb = check_report(text, doc)
    ids = by_id(tb)
    # FT003 anchors follow (file, line) order, whatever the doc order
    order = sorted(doc["findings"][:3], key=lambda f: (f["file"], f["line"]))
    for i, f in enumerate(order, 1):
        assert f["message"] in ids[f"FT003-{i}"].text()
    assert "FT001-1" in ids and "FT010-1" in ids and "rule-FT003" in ids
    # rule explanations, snippets with the hit line marked
    assert "Off-by-one layouts." in ids["rule-FT003"].text()
    hit = [n for n in ids["FT003-1"].walk() if "hit" in n.classes()]
    assert hit and hit[0].text().startswith("41") and "line 41" in hit[0].text()
    plain_hit = [n for n in ids["FT001-1"].walk() if "hit" in n.classes()]
    assert plain_hit and "class PlainForCausalLM:" in plain_hit[0].text()
    # capture path and worked example of Alpha, its graph, links to sources
    alpha = ids["model-pkg.models.alpha.AlphaForCausalLM"]
    steps = [n for n in alpha.walk() if n.tag == "li" and "step" in n.classes()]
    assert [s.text().split()[0] for s in steps] == ["config", "setter", "attribute", "loop", "concat", "fc"]
    assert "b=0 embedding, b=3, b=31" in alpha.text()
    graph_svg = [n for n in alpha.walk() if n.tag == "svg" and "graph" in n.classes()]
    assert len(graph_svg) == 1
    graph_text = graph_svg[0].text()
    for label in (
        "eagle_aux_hidden_state_layer_ids",
        "AlphaModel.layers_to_capture",
        "Eagle3Draft.fc in=3*H",
        "fc input",
    ):
        assert label in graph_text
    assert "setter:evil" not in graph_text and HOSTILE_PWN not in graph_text  # other models' nodes stay out
    hrefs = [n.attrs["href"] for n in graph_svg[0].walk() if n.tag == "a"]
    assert "vscode://file/src/engine/pkg/models/alpha.py:40" in hrefs
    vl = ids["model-pkg.models.vl.VLForConditionalGeneration"].text()
    assert "default layer ids give no resolvable layout" in vl and "delegate not resolved" in vl
    evil = next(node for key, node in ids.items() if key.startswith("model-pkg.models.evil."))
    assert "outside 0..8" in evil.text()  # b=10 > L=8
    # the model without capture says so, the finding on the method links to its class
    assert (
        "No capture path (no capture setter, config attribute or serving-config hook"
        in ids["model-pkg.models.plain.PlainForCausalLM"].text()
    )
    links = [n.attrs.get("href") for n in ids[order[0]["rule"] + "-1"].walk() if n.tag == "a"]
    assert "#model-pkg.models.alpha.AlphaForCausalLM" in links


def test_hostile_strings_stay_text():
    doc = sample_doc()
    text = render_html(doc)
    tb = check_report(text, doc)
    # no raw markup from the data anywhere in the bytes
    for bad in ("<script>alert", "<img src=x", "<svg onload", 'onerror="'):
        assert bad not in text
    # ...but the strings are there as text, intact
    visible = tb.root.text()
    for s in (HOSTILE, HOSTILE_PWN, HOSTILE_FILE):
        assert s in visible
    evil_row = next(n for n in tb.root.walk() if n.tag == "tr" and HOSTILE in n.text())
    assert HOSTILE_PWN in evil_row.attrs["data-search"] or HOSTILE_PWN.lower() in evil_row.attrs["data-search"]
    # the JSON block cannot be closed from inside: no '<' at all, and it round-trips
    block = re.search(r'<script type="application/json" id="flowtrace-data">(.*?)</script>', text, re.S).group(1)
    assert "<" not in block and ">" not in block and "&" not in block
    data = json.loads(block)
    assert data["doc"]["models"][1]["class"] == HOSTILE
    # hostile file paths are percent-encoded inside source links
    links = [a["href"] for t, a in tb.starttags if a.get("href", "").startswith("vscode://")]
    assert any("%22%3E%3Csvg%20onload" in h for h in links)
    assert not any(c in h for h in links for c in '"<> ')


def test_json_escaping_helper():
    payload = {"s": "</script><!-- & \u2028", "n": float("nan")}
    out = str(report.json_for_script(payload))
    assert "<" not in out and ">" not in out and "&" not in out and "\u2028" not in out
    assert json.loads(out) == {"n": None, "s": "</script><!-- & \u2028"}


def test_link_base_links():
    doc = sample_doc()
    text = render_html(doc, link_base="https://example.test/repo/blob/abc123/")
    tb = check_report(text, doc, link_prefix="https://example.test/repo/blob/abc123/")
    hrefs = {a["href"] for t, a in tb.starttags if "href" in a}
    assert "https://example.test/repo/blob/abc123/pkg/models/alpha.py#L40" in hrefs
    assert not any(h.startswith("vscode:") for h in hrefs)


def test_deterministic_bytes():
    doc = sample_doc()
    first = render_html(doc)
    assert render_html(copy.deepcopy(doc)) == first
    # dict order of the optional keys does not matter
    shuffled = copy.deepcopy(doc)
    for key in ("rules", "paths", "examples", "sources"):
        shuffled[key] = dict(reversed(list(shuffled[key].items())))
    shuffled["graph"]["nodes"] = list(reversed(shuffled["graph"]["nodes"]))
    shuffled["graph"]["links"] = list(reversed(shuffled["graph"]["links"]))
    shuffled["findings"] = list(reversed(shuffled["findings"]))
    # findings reversed change only the embedded doc copy, not the visible report
    strip_data = lambda t: re.sub(  # noqa: E731
        r'(<script type="application/json" id="flowtrace-data">).*?(</script>)', r"\1\2", t, flags=re.S
    )
    assert strip_data(render_html(shuffled)) == strip_data(first)


def test_optional_keys_absent_degrade():
    doc = sample_doc()
    for key in ("rules", "paths", "examples", "graph", "sources"):
        del doc[key]
    text = render_html(doc)
    tb = check_report(text, doc)
    alpha = by_id(tb)["model-pkg.models.alpha.AlphaForCausalLM"].text()
    assert "no capture paths" in alpha and "no worked examples" in alpha and "no data-flow graph" in alpha
    assert "flowtrace explain FT003" in by_id(tb)["rule-FT003"].text()
    assert not [n for n in tb.root.walk() if "snippet" in n.classes()]


def test_minimal_and_empty_docs():
    doc = {"schema": "flowtrace.scan/1", "models": [], "findings": []}
    tb = check_report(render_html(doc), doc)
    assert "No findings." in by_id(tb)["findings"].text()
    doc2 = {
        "schema": "flowtrace.scan/1",
        "models": [{"class": "X", "qualname": "X", "support": "weird", "capture": None}],
        "findings": [],
        "graph": {
            "nodes": [{"id": 1, "kind": "model", "model": "X", "label": "X"}, {"id": [2, "b"], "kind": "odd"}],
            "edges": [{"source": 1, "target": [2, "b"], "label": "e"}],
        },
    }
    tb2 = check_report(render_html(doc2), doc2)
    assert [n for n in tb2.root.walk() if n.tag == "svg" and "graph" in n.classes()]


def test_probe_marks_model_and_findings():
    doc = sample_doc()
    alpha = "pkg.models.alpha.AlphaForCausalLM"
    tb = check_report(render_html(doc, probe=capture_probe(alpha)), doc)
    ids = by_id(tb)
    panel = ids["probe"].text()
    assert "refuted" in panel and "b=0 embedding, b=3, b=30" in panel and HOSTILE in panel
    row = rows_by_model(tb)["model-" + alpha]
    assert any("probe-refuted" in n.classes() for n in row.walk())
    detail = ids["model-" + alpha]
    assert any("probe-refuted" in n.classes() for n in detail.walk())
    marked = [
        fid for fid in data_block(tb)["ui"]["findings"] if any("probe-refuted" in n.classes() for n in ids[fid].walk())
    ]
    assert marked == ["FT003-1"]  # only the finding on the probed model
    assert data_block(tb)["ui"]["default_model"] == "model-" + alpha
    # a draft probe with a confirmed claim, naming the model by class name
    draft = {
        "schema": "flowtrace.probe/1",
        "command": "draft",
        "target": {"name": "t", "num_layers": 32},
        "boundaries": [0, 3, 31],
        "candidates": [{"boundaries": [0, 3, 31], "sources": ["claim"], "correct": 90, "total": 100, "accuracy": 0.9}],
        "verdict": "clear winner",
        "reason": "margin 0.4",
        "claim": {"source": "x", "model": "AlphaForCausalLM", "boundaries": [0, 3, 31]},
        "claim_verdict": "confirmed",
        "claim_evidence": "winner",
        "warnings": [],
    }
    tb2 = check_report(render_html(doc, probe=draft), doc)
    assert any("probe-confirmed" in n.classes() for n in rows_by_model(tb2)["model-" + alpha].walk())
    # a probe naming a model that is not in the matrix is shown, but marks nothing
    tb3 = check_report(render_html(doc, probe=capture_probe("NoSuchModel")), doc)
    assert "not in this matrix" in by_id(tb3)["probe"].text()


def test_example_report_is_fresh():
    committed = REPO / example_report.EXAMPLE_REPORT
    doc = example_report.example_document()
    fresh = example_report.render_example(doc)
    assert str(REPO) not in fresh, "the example report must not contain absolute paths"
    same = committed.exists() and committed.read_text(encoding="utf-8") == fresh
    assert same, (
        f"{example_report.EXAMPLE_REPORT} is stale: the report template or the {example_report.EXAMPLE_FIXTURE} scan"
        " changed. Regenerate it with `python tests/example_report.py` and commit the result."
    )
    check_report(fresh, doc)


def test_cli_entry_point(tmp_path):
    doc_path = tmp_path / "doc.json"
    doc_path.write_text(json.dumps(sample_doc()), encoding="utf-8")
    probe_path = tmp_path / "probe.json"
    probe_path.write_text(json.dumps(capture_probe("AlphaForCausalLM")), encoding="utf-8")
    out = tmp_path / "r.html"
    assert (
        report.main([str(doc_path), "-o", str(out), "--probe", str(probe_path), "--link-base", "https://h.test/b"]) == 0
    )
    check_report(out.read_text(encoding="utf-8"), sample_doc(), link_prefix="https://h.test/b/")


def test_deterministic_across_hash_seeds(tmp_path):
    """Set iteration order changes with PYTHONHASHSEED; the bytes must not."""
    import hashlib
    import os
    import subprocess
    import sys

    doc_path = tmp_path / "doc.json"
    doc_path.write_text(json.dumps(sample_doc()), encoding="utf-8")
    code = (
        "import json, sys, hashlib; from flowtrace.render.html import render_html; "
        "print(hashlib.sha256(render_html(json.load(open(sys.argv[1]))).encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(doc_path)], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == hashlib.sha256(render_html(sample_doc()).encode()).hexdigest()


def test_a_draft_model_is_marked_draft_in_the_scan_and_labelled_so(tmp_path):
    import shutil

    from fixture_paths import SGLANG_LIKE
    from flowtrace import api
    from flowtrace.index.build import IndexOptions
    from flowtrace.render.report_data import report_document

    tree = tmp_path / "engine"
    shutil.copytree(SGLANG_LIKE, tree, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    add_draft_model(tree)
    result = api.scan(tree, options=IndexOptions(use_cache=False, jobs=1))
    doc = report_document(result, api.findings(result))
    models = {m["class"]: m for m in doc["models"]}
    # The draft inherits the setter, but AlphaEagle3Model has no capture loop: broken for the
    # capture analysis, a draft for the reader. The fixture's real defects stay unmarked.
    assert models["AlphaForCausalLMEagle3"]["support"] == "broken" and models["AlphaForCausalLMEagle3"]["draft"] is True
    assert models["ZetaForCausalLM"]["draft"] is False and models["AlphaForCausalLM"]["draft"] is False
    tb = check_report(render_html(doc), doc)
    row = rows_by_model(tb)["model-sglang.srt.models.alpha_eagle3.AlphaForCausalLMEagle3"]
    badge = next(n for n in row.walk() if "badge" in n.classes())
    assert badge.text() == "draft" and "support-draft" in badge.classes()


def test_the_legend_names_every_status():
    tb = parse(render_html(sample_doc()))
    legend = by_id(tb)["legend"]
    terms = [n.text() for n in legend.walk() if n.tag == "dt"]
    assert terms == [
        "supported",
        "inherited",
        "delegated",
        "conditional",
        "draft",
        "broken",
        "1 error",
        "none",
        "error",
        "warning",
        "info",
    ]
    # the severities say which consequences they stand for, and that a finding's follows its own
    said = {n.text() for n in legend.walk() if n.tag == "dd"}
    assert any("silent_wrong" in t and "crash_serving" in t for t in said)
    assert any("crash_startup" in t and "fragile" in t for t in said)
    assert any("refused_startup" in t and "follows its own consequence" in t for t in said)


def test_config_readers_fold_into_one_node_per_key():
    import networkx as nx

    from flowtrace.render.svg_layout import collapse_config_readers

    g = nx.MultiDiGraph()
    g.add_node("config:k", kind="config", label="k")
    g.add_node("setter:S", kind="setter", label="S.set")
    g.add_edge("config:k", "setter:S", label="ids", model="M")
    for i, fn in enumerate(["Runner.init", "aux_count", "Draft.__init__"]):
        g.add_node(f"read:{i}", kind="config", label=f"read k ({fn})", file="f.py", line=i + 1)
        g.add_edge("config:k", f"read:{i}", label="read")
    g.add_node("config:lonely", kind="config", label="lonely")
    g.add_node("read:x", kind="config", label="read lonely (f)")
    g.add_edge("config:lonely", "read:x", label="read")
    out = collapse_config_readers(g)
    # one reader alone stays
    assert sorted(out.nodes) == ["config:k", "config:lonely", "read:x", "readers:config:k", "setter:S"]
    # f.py:1, 2, 3
    assert out.nodes["readers:config:k"]["label"] == "read in 3 places: Runner.init, aux_count, Draft.__init__"
    assert out.has_edge("config:k", "setter:S") and g.number_of_nodes() == 7  # the input is not changed
