"""The data-flow graph and its exports load back."""

from __future__ import annotations

import io
import json
import shutil
import subprocess

import networkx as nx
import pytest

from flowtrace.analysis import graph as graphs


def test_path_from_config_key_to_fc_for_a_delegating_model(sglang_scan):
    g = sglang_scan.graph
    model = sglang_scan.project.row("OmegaVLForConditionalGeneration").qualname
    sub = graphs.model_subgraph(g, model)
    kinds = {sub.nodes[n]["kind"] for n in sub}
    assert {"config", "model", "setter", "attribute", "loop", "container", "return", "concat", "fc"} <= kinds
    config = "config:eagle_config.eagle_aux_hidden_state_layer_ids"
    fc = next(n for n in sub if sub.nodes[n]["kind"] == "fc")
    assert nx.has_path(sub, config, fc)
    setters = [n for n in nx.shortest_path(sub, config, fc) if sub.nodes[n]["kind"] == "setter"]
    assert [sub.nodes[s]["label"] for s in setters] == ["OmegaVLForConditionalGeneration.set_eagle3_layers_to_capture", "GammaForCausalLM.set_eagle3_layers_to_capture"]


def test_subgraph_has_only_that_models_edges(sglang_scan):
    alpha = sglang_scan.project.row("AlphaForCausalLM").qualname
    sub = graphs.model_subgraph(sglang_scan.graph, alpha)
    assert all(d.get("model") in ("", None, alpha) for _, _, d in sub.edges(data=True))


def test_json_and_graphml_round_trip(sglang_scan):
    g = sglang_scan.graph
    back = nx.node_link_graph(json.loads(graphs.to_json(g)), edges="links", multigraph=True, directed=True)
    assert back.number_of_nodes() == g.number_of_nodes() and back.number_of_edges() == g.number_of_edges()
    from_xml = nx.read_graphml(io.BytesIO(graphs.to_graphml(g).encode()))
    assert set(from_xml.nodes) == set(g.nodes)


def test_dot_is_accepted_by_graphviz_or_parses(sglang_scan, tmp_path):
    text = graphs.to_dot(sglang_scan.graph)
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return
    pydot = pytest.importorskip("pydot", reason="neither graphviz nor pydot installed")
    (parsed,) = pydot.graph_from_dot_data(text)
    assert len(parsed.get_nodes()) >= sglang_scan.graph.number_of_nodes()
