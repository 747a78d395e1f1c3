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
    assert [sub.nodes[s]["label"] for s in setters] == [
        "OmegaVLForConditionalGeneration.set_eagle3_layers_to_capture",
        "GammaForCausalLM.set_eagle3_layers_to_capture",
    ]


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


# -- the graph is built from the capture chains (issue 11) ---------------------------------------
# Expected nodes and file:lines are read from the fixture modules, not from flowtrace's output.


def _path_nodes(sub, start, end):
    return [
        (sub.nodes[n]["link"], sub.nodes[n]["file"].rsplit("/", 1)[-1], sub.nodes[n]["line"])
        for n in nx.shortest_path(sub, start, end)
    ]


def test_delegating_chain_is_stored_link_by_link_with_file_lines(sglang_scan):
    """omega_vl.py:17 hands the ids to GammaForCausalLM's setter (gamma.py:53), which writes
    GammaModel.layers_to_capture (class at gamma.py:27); the loop hands a capture callback to
    layer i at gamma.py:40; the draft concatenates at eagle3_draft.py:23 and feeds its fc."""
    g = sglang_scan.graph
    model = sglang_scan.project.row("OmegaVLForConditionalGeneration").qualname
    sub = graphs.model_subgraph(g, model)
    fc = next(n for n in sub if sub.nodes[n]["kind"] == "fc")
    path = _path_nodes(sub, "config:eagle_config.eagle_aux_hidden_state_layer_ids", fc)
    assert path[:7] == [
        ("id_source", "", 0),
        ("transform", "omega_vl.py", 17),
        ("transform", "gamma.py", 53),
        ("holder", "gamma.py", 27),
        ("site", "gamma.py", 40),
        ("stream", "gamma.py", 40),
        ("return", "gamma.py", 40),
    ]
    assert path[7] == ("concat", "eagle3_draft.py", 23) and path[8][0] == "fc"
    holder = "attribute:sglang.srt.models.gamma.GammaModel.layers_to_capture"
    assert g.nodes[holder]["holder_kind"] == "direct"
    assert (
        g.nodes["setter:sglang.srt.models.gamma.GammaForCausalLM.set_eagle3_layers_to_capture"]["transform"]
        == "conditional"
    )
    site = g.nodes["loop:sglang/srt/models/gamma.py:40"]
    # the layer uses it before its sub-modules (gamma.py:21)
    assert (site["mechanism"], site["point"]) == ("callback", "input")
    edges = {
        (sub.nodes[u]["link"], sub.nodes[v]["link"]): d["link"]
        for u, v, d in sub.edges(data=True)
        if d.get("model") == model
    }
    assert edges[("transform", "transform")] == "delegates" and edges[("transform", "holder")] == "writes"
    assert edges[("holder", "site")] == "site" and edges[("site", "stream")] == "records"


def test_graph_nodes_are_the_rows_chain(sglang_scan):
    """Every row with a site has the chain's site and holder as nodes (the graph is a view
    of the links, not a second derivation)."""
    g = sglang_scan.graph
    for row in sglang_scan.rows:
        chain = row.chain
        if chain is None or chain.site is None or chain.holder is None or chain.holder.holder is None:
            continue
        assert f"loop:{chain.site.location}" in g
        sub = graphs.model_subgraph(g, row.qualname)
        assert f"attribute:{chain.holder.holder}.{chain.holder.attribute}" in sub


def test_fixed_slot_collector_is_a_slots_node(sglang_scan):
    """rho.py: SlotBuffer(len(self.layers_to_capture)) (rho.py:25), filled at rho.py:28;
    SlotBuffer.finalize raises at slots.py:17 when fewer states arrive than slots."""
    g = sglang_scan.graph
    sub = graphs.model_subgraph(g, sglang_scan.project.row("RhoForCausalLM").qualname)
    (slots,) = [n for n in sub if sub.nodes[n]["kind"] == "slots"]
    node = sub.nodes[slots]
    assert slots == "slots:sglang.srt.layers.slots.SlotBuffer"
    assert (node["file"], node["line"]) == ("sglang/srt/layers/slots.py", 17)
    assert node["check"] == "len(self._filled) != self._slots"
    (container,) = [u for u, _ in sub.in_edges(slots)]
    assert sub.nodes[container]["file"].endswith("models/rho.py") and sub.nodes[container]["link"] == "stream"


def test_none_residual_is_on_the_stream_node(sglang_scan):
    """nu.py:31 `stream = hidden_states + residual` with residual None at the first layer."""
    g = sglang_scan.graph
    sub = graphs.model_subgraph(g, sglang_scan.project.row("NuForCausalLM").qualname)
    (stream,) = [sub.nodes[n] for n in sub if sub.nodes[n]["kind"] == "container"]
    assert stream["raising_index"] == 0 and stream["raises_at"].endswith("models/nu.py:31")
    assert stream["stream_kind"] == "residual_stream"


def test_setterless_chain_in_the_graph():
    """lmdeploy_like alpha: AlphaModel reads config.aux_hidden_state_layers (models/alpha.py:28),
    the builder writes the engine's own layout (configurations/alpha.py:19: the draft's ids are
    ignored), the loop appends at models/alpha.py:36."""
    from flowtrace import api

    from fixture_paths import LMDEPLOY_LIKE

    result = api.scan(LMDEPLOY_LIKE, options=api.IndexOptions(jobs=1, use_cache=False))
    row = result.model("AlphaForCausalLM")
    sub = graphs.model_subgraph(result.graph, row.qualname)
    (source,) = [n for n in sub if sub.nodes[n]["link"] == "id_source"]
    (site,) = [n for n in sub if sub.nodes[n]["link"] == "site"]
    path = [
        (sub.nodes[n]["link"], sub.nodes[n]["file"], sub.nodes[n]["line"]) for n in nx.shortest_path(sub, source, site)
    ]
    assert path == [
        ("id_source", "lmdeploy/pytorch/models/alpha.py", 28),
        ("transform", "lmdeploy/pytorch/configurations/alpha.py", 19),
        ("holder", "lmdeploy/pytorch/models/alpha.py", 24),
        ("site", "lmdeploy/pytorch/models/alpha.py", 36),
    ]
    assert (
        sub.nodes[source]["key"] == "aux_hidden_state_layers" and sub.nodes[source]["source_kind"] == "config_attribute"
    )
    builder = nx.shortest_path(sub, source, site)[1]
    assert sub.nodes[builder]["transform"] == "ignored"


def test_dynamic_holder_is_a_conditional_node(vllm_scan):
    """llava_like.py:25 builds self.language_model from config.text_config at run time: the
    holder link is dynamic, conditional on text_config.architectures, and is a graph node
    (evidence: that construction), written by the interface setter's chain."""
    row = vllm_scan.project.row("LlavaLikeForConditionalGeneration")
    assert row.chain.holder.kind == "dynamic" and row.chain.holder.depends_on == "text_config.architectures"
    sub = graphs.model_subgraph(vllm_scan.graph, row.qualname)
    (holder,) = [sub.nodes[n] for n in sub if sub.nodes[n]["link"] == "holder"]
    assert (holder["holder_kind"], holder["depends_on"], holder["holder"]) == (
        "dynamic",
        "text_config.architectures",
        "",
    )
    assert (holder["file"], holder["line"]) == ("vllm/model_executor/models/llava_like.py", 25)
    assert not [n for n in sub if sub.nodes[n]["link"] == "site"]  # the site is the target config's class's


def test_dropped_return_ends_the_path_at_its_own_node(sglang_scan):
    """mu.py: MuForCausalLM builds AlphaModel (alpha.py's capturing loop) but its setter never
    sets capture_aux_hidden_states (False at mu.py:12), so forward returns `out[0]` at mu.py:18:
    the return link is flag_never_set there and the path reaches no concatenation; AlphaForCausalLM,
    sharing the same capturing loop, still reaches the draft's concat."""
    g = sglang_scan.graph
    mu = graphs.model_subgraph(g, sglang_scan.project.row("MuForCausalLM").qualname)
    (ret,) = [n for n in mu if mu.nodes[n]["link"] == "return"]
    assert (mu.nodes[ret]["return_kind"], mu.nodes[ret]["file"], mu.nodes[ret]["line"]) == (
        "flag_never_set",
        "sglang/srt/models/mu.py",
        18,
    )
    assert not [n for n in mu if mu.nodes[n]["link"] in ("concat", "fc")]
    alpha = graphs.model_subgraph(g, sglang_scan.project.row("AlphaForCausalLM").qualname)
    assert any(alpha.nodes[n]["link"] == "concat" for n in alpha)
    assert {n for n in mu if mu.nodes[n]["link"] == "site"} == {n for n in alpha if alpha.nodes[n]["link"] == "site"}
