"""One networkx graph per scanned repo: how layer ids flow from a draft config to the fc.

Typed nodes (config key, model class, setter, capture attribute, capture loop, aux
container, model return, concatenation, draft fc) and labelled edges (id transform,
delegation, inheritance, capture point, mechanism). Inheritance and delegation are already
resolved by :mod:`flowtrace.analysis.resolve`, so a path from a config key reaches the capture loop
for any model class. Rules and the HTML report read this graph; exports are node-link JSON,
GraphML and DOT.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import networkx as nx

from flowtrace.model import facts as F

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import Project

KINDS = ("config", "model", "setter", "attribute", "loop", "container", "return", "concat", "fc")


def _node(g: nx.MultiDiGraph, node_id: str, kind: str, label: str, location: F.Location | None = None, model: str | None = None) -> str:
    if node_id not in g:
        g.add_node(node_id, kind=kind, label=label, file=location.file if location else "", line=location.line if location else 0, model=model or "")
    return node_id


def build_graph(project: Project, engine_keys: tuple[str, ...] = ()) -> nx.MultiDiGraph:
    g = nx.MultiDiGraph()
    config_nodes = [_node(g, f"config:{k}", "config", k) for k in engine_keys or project.conv.layer_id_keys]
    draft_modules: set[str] = set()
    for ff in project.files:
        for fc in ff.fc_definitions:
            _node(g, f"fc:{fc.class_qualname}", "fc", f"{fc.class_qualname.rsplit('.', 1)[-1]}.fc in={fc.in_features}", fc.location)
            draft_modules.add(ff.module)
        for read in ff.config_reads:
            node = _node(g, f"read:{read.location}", "config", f"read {read.key} ({read.function})", read.location)
            g.add_edge(f"config:{read.key}" if f"config:{read.key}" in g else node, node, label="read")
        for concat in ff.concat_sites:
            node = _node(g, f"concat:{concat.location}", "concat", concat.expression[:80], concat.location)
            if ff.module in draft_modules:
                for fc in ff.fc_definitions:
                    g.add_edge(node, f"fc:{fc.class_qualname}", label="fc input")
    for row in project.rows:
        model = _node(g, f"model:{row.qualname}", "model", row.name, row.location, row.qualname)
        c = row.capture
        if c is None:
            continue
        previous = None
        for n, setter in enumerate(c.chain):
            sid = _node(g, f"setter:{setter.class_qualname}.{setter.method}", "setter", f"{setter.class_qualname.rsplit('.', 1)[-1]}.{setter.method}", setter.location)
            if n == 0:
                for cfg in config_nodes:
                    g.add_edge(cfg, sid, label="ids", model=row.qualname)
                g.add_edge(model, sid, label="inherits" if c.inherited else "defines", model=row.qualname)
            else:
                g.add_edge(previous, sid, label=f"delegates ({c.chain[n - 1].id_transform})", model=row.qualname)
            previous = sid
        if c.holder is None or c.site is None:
            continue
        site = c.site
        attribute = site.attribute or next((w.rsplit(".", 1)[-1] for s in c.chain for w in s.writes), "capture attribute")
        aid = _node(g, f"attribute:{c.holder}.{attribute}", "attribute", f"{c.holder.rsplit('.', 1)[-1]}.{attribute}", site.location)
        g.add_edge(previous, aid, label=str(c.effective_transform), model=row.qualname)
        lid = _node(g, f"loop:{site.location}", "loop", f"{site.function} ({site.mechanism})", site.location)
        g.add_edge(aid, lid, label=f"point: {c.point}", model=row.qualname)
        cid = _node(g, f"container:{site.location}:{site.container}", "container", site.container or "aux", site.location)
        g.add_edge(lid, cid, label=str(site.mechanism), model=row.qualname)
        rid = _node(g, f"return:{site.class_qualname.rpartition('.')[0]}.{site.function}", "return", f"{site.function} returns aux", site.location)
        g.add_edge(cid, rid, label="returned", model=row.qualname)
        module = site.class_qualname.rpartition(".")[0]
        for ff in project.files:
            if ff.module == module or ff.module in draft_modules:
                for concat in ff.concat_sites:
                    g.add_edge(rid, f"concat:{concat.location}", label="concatenated", model=row.qualname)
    return g


def model_subgraph(g: nx.MultiDiGraph, qualname: str) -> nx.MultiDiGraph:
    """One model's path: the edges tagged with that model, plus untagged edges (draft side)
    reachable from them. Other models' parallel edges are left out."""
    sub = nx.MultiDiGraph()
    for u, v, key, data in g.edges(keys=True, data=True):
        if data.get("model") == qualname:
            sub.add_edge(u, v, key=key, **data)
    frontier = [n for n in sub.nodes if g.nodes[n].get("kind") != "config"]  # config reads are not on the path
    while frontier:
        node = frontier.pop()
        for _, nxt, key, data in g.out_edges(node, keys=True, data=True):
            if not data.get("model") and not sub.has_edge(node, nxt, key):
                if nxt not in sub:
                    frontier.append(nxt)
                sub.add_edge(node, nxt, key=key, **data)
    for node in sub.nodes:
        sub.nodes[node].update(g.nodes[node])
    return sub


def to_json(g: nx.MultiDiGraph) -> str:
    data = nx.node_link_data(g, edges="links")
    data["nodes"] = sorted(data["nodes"], key=lambda n: n["id"])
    data["links"] = sorted(data["links"], key=lambda e: (e["source"], e["target"], e.get("label", ""), e.get("key", 0)))
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def to_graphml(g: nx.MultiDiGraph) -> str:
    return "\n".join(nx.generate_graphml(g, prettyprint=True)) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(g: nx.MultiDiGraph) -> str:
    shapes = {"config": "note", "model": "box3d", "setter": "box", "attribute": "cylinder", "loop": "component", "container": "folder", "return": "cds", "concat": "trapezium", "fc": "doubleoctagon"}
    lines = ["digraph flowtrace {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    for node, data in sorted(g.nodes(data=True)):
        label = data.get("label", node)
        if data.get("file"):
            label = f"{label}\n{data['file']}:{data['line']}"
        lines.append(f"  {_dot_quote(node)} [label={_dot_quote(label)}, shape={shapes.get(data.get('kind'), 'ellipse')}];")
    for u, v, data in sorted(g.edges(data=True), key=lambda e: (e[0], e[1], e[2].get("label", ""))):
        lines.append(f"  {_dot_quote(u)} -> {_dot_quote(v)} [label={_dot_quote(data.get('label', ''))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
