"""One networkx graph per scanned repo: the capture chains of docs/architecture.md, as typed nodes and edges.

Every model row's :class:`flowtrace.model.links.CaptureChain` is stored link by link: the id
source (``config`` nodes), each transform (``setter``), the holder and its capture attribute
(``attribute``), the capture site (``loop``), what it records (``container``, with the stream
semantics), a fixed-slot collector (``slots``), the return path (``return``) and the
concatenations the states reach (``concat`` -> draft ``fc``). Each node has ``kind`` (its
shape), ``link`` (the chain link it stands for), ``file``/``line`` evidence and link-specific
attributes; each chain edge has ``link`` (what connects the two), ``label`` and ``model``.
Links shared by several models (a base class's setter, one capture loop) are one node.
Nothing here re-derives a chain from row fields: the graph is a view of the links, and
rules, trace and the report read the same links. Exports: node-link JSON, GraphML, DOT.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from flowtrace.model import facts as F
from flowtrace.model.links import CaptureChain

if TYPE_CHECKING:
    import networkx as nx  # imported where a graph is built or written: a warm scan whose answers
    # come from the memo never needs it (about a tenth of a second of start-up)

    from flowtrace.analysis.resolve import ModelRow, Project

KINDS = ("config", "model", "setter", "attribute", "loop", "container", "slots", "return", "concat", "fc")
# The chain link each node kind stands for (docs/architecture.md's numbering in the comments).
LINKS = {
    "config": "id_source",  # 1
    "setter": "transform",  # 2
    "attribute": "holder",  # 3
    "loop": "site",  # 4
    "container": "stream",  # 5
    "slots": "slots",  # 6 (fixed-slot collectors)
    "return": "return",  # 6
    "concat": "concat",  # 7
    "fc": "fc",
    "model": "model",
}


def _node(
    g: nx.MultiDiGraph,
    node_id: str,
    kind: str,
    label: str,
    location: F.Location | None = None,
    model: str | None = None,
    **attrs: str | int,
) -> str:
    """Add a node once (shared links stay one node); GraphML needs plain values, so a
    missing place is ``file=""``, ``line=0``."""
    if node_id not in g:
        g.add_node(
            node_id,
            kind=kind,
            link=LINKS[kind],
            label=label,
            file=location.file if location else "",
            line=location.line if location else 0,
            model=model or "",
            **attrs,
        )
    return node_id


def _edge(g: nx.MultiDiGraph, u: str, v: str, link: str, label: str, model: str) -> None:
    g.add_edge(u, v, link=link, label=label, model=model)


def _text(value: object) -> str:
    return "" if value is None else str(value)


def prepare() -> None:
    """Import what :func:`build_graph` needs ahead of it: a check of a tree that is not cached
    hands this to the index, which runs it while its workers parse, instead of after them.
    (A tenth of a second that would otherwise wait until the index is done; warm scans, whose
    answers come from the memo, never call it.)"""
    import networkx  # noqa: F401


def build_graph(project: Project, engine_keys: tuple[str, ...] = ()) -> nx.MultiDiGraph:
    """The repo graph: the draft side (fc, config reads, concatenations), then each row's chain."""
    import networkx as nx

    g = nx.MultiDiGraph()
    config_nodes = [_node(g, f"config:{k}", "config", k) for k in engine_keys or project.conv.layer_id_keys]
    _draft_side(g, project)
    for row in project.rows:
        _node(g, f"model:{row.qualname}", "model", row.name, row.location, row.qualname)
        if row.chain is not None:
            _add_chain(g, row, row.chain, config_nodes)
    return g


def _draft_side(g: nx.MultiDiGraph, project: Project) -> None:
    """Facts that are not one model's link: the draft's fc, where it reads ids, and the
    concatenations (wired to the fc of their draft module)."""
    draft_modules: set[str] = set()
    for ff in project.files:
        for fc in ff.fc_definitions:
            _node(
                g,
                f"fc:{fc.class_qualname}",
                "fc",
                f"{fc.class_qualname.rsplit('.', 1)[-1]}.fc in={fc.in_features}",
                fc.location,
            )
            draft_modules.add(ff.module)
        for read in ff.config_reads:
            node = _node(g, f"read:{read.location}", "config", f"read {read.key} ({read.function})", read.location)
            g.add_edge(f"config:{read.key}" if f"config:{read.key}" in g else node, node, link="read", label="read")
        for concat in ff.concat_sites:
            node = _node(g, f"concat:{concat.location}", "concat", concat.expression[:80], concat.location)
            if ff.module in draft_modules:
                for fc in ff.fc_definitions:
                    g.add_edge(node, f"fc:{fc.class_qualname}", link="fc_input", label="fc input")


def _add_chain(g: nx.MultiDiGraph, row: ModelRow, chain: CaptureChain, config_nodes: list[str]) -> None:
    """One row's links, outermost first; a chain stops where its next link is missing."""
    last = _source_and_transforms(g, row, chain, config_nodes)
    holder = _holder(g, row, chain, last)
    if holder is None or chain.site is None:
        return
    container = _site_and_stream(g, row, chain, holder)
    _return_and_concat(g, row, chain, container)


def _source_and_transforms(
    g: nx.MultiDiGraph, row: ModelRow, chain: CaptureChain, config_nodes: list[str]
) -> str | None:
    """Links 1-2: the id source and each setter (delegation edges say what the previous one did)."""
    model, q = f"model:{row.qualname}", row.qualname
    if chain.source.kind == F.SourceKind.SETTER:
        entries = config_nodes
    else:
        src = chain.source
        entry = _node(
            g,
            f"source:{src.kind}:{src.key}:{_text(src.location)}",
            "config",
            f"{src.kind} {src.key}",
            src.location,
            source_kind=str(src.kind),
            key=_text(src.key),
        )
        _edge(g, model, entry, "reads", "reads", q)
        entries = [entry]
    previous: str | None = entries[0] if entries and chain.source.kind != F.SourceKind.SETTER else None
    prefix = "setter" if chain.source.kind == F.SourceKind.SETTER else "builder"  # a config builder writes the layout
    for n, t in enumerate(chain.transforms):
        sid = _node(
            g,
            f"{prefix}:{t.owner}.{t.method}",
            "setter",
            f"{t.owner.rsplit('.', 1)[-1]}.{t.method}",
            t.location,
            transform=str(t.transform),
            default=_text(t.default),
        )
        if n == 0:
            for entry in entries:
                _edge(g, entry, sid, "ids", "ids", q)
            if chain.source.kind == F.SourceKind.SETTER:
                _edge(g, model, sid, "defines", "inherits" if t.owner != q else "defines", q)
        else:
            _edge(g, previous or sid, sid, "delegates", f"delegates ({chain.transforms[n - 1].transform})", q)
        previous = sid
    return previous


def _holder(g: nx.MultiDiGraph, row: ModelRow, chain: CaptureChain, previous: str | None) -> str | None:
    """Link 3: the holder's capture attribute (a dynamic holder: the config key it depends on)."""
    h = chain.holder
    if h is None or previous is None:
        return None
    attribute = h.attribute or "capture attribute"
    if h.holder is None:
        aid = _node(
            g,
            f"attribute:dynamic:{h.depends_on}:{attribute}",
            "attribute",
            f"{attribute} (class from {h.depends_on})",
            h.location,
            holder="",
            holder_kind=str(h.kind),
            depends_on=_text(h.depends_on),
        )
    else:
        aid = _node(
            g,
            f"attribute:{h.holder}.{attribute}",
            "attribute",
            f"{h.holder.rsplit('.', 1)[-1]}.{attribute}",
            h.location,
            holder=h.holder,
            holder_kind=str(h.kind),
            depends_on=_text(h.depends_on),
        )
    _edge(g, previous, aid, "writes", str(chain.effective_transform), row.qualname)
    return aid


def _site_and_stream(g: nx.MultiDiGraph, row: ModelRow, chain: CaptureChain, holder: str) -> str:
    """Links 4-5 (and a fixed-slot collector): the site and what it records."""
    site, stream, q = chain.site, chain.stream, row.qualname
    assert site is not None
    lid = _node(
        g,
        f"loop:{site.location}",
        "loop",
        f"{site.function} ({site.mechanism})",
        site.location,
        mechanism=str(site.mechanism),
        point=str(site.point),
    )
    _edge(g, holder, lid, "site", f"point: {site.point}", q)
    cid = _node(
        g, f"container:{site.location}:{site.container}", "container", site.container or "aux", site.location,
        stream_kind=_text(stream.kind if stream else None), expression=_text(stream.expression if stream else None),
        raising_index=stream.raising_index if stream and stream.raising_index is not None else -1,
        raises_at=_text(stream.raises_at if stream else None),
    )
    _edge(g, lid, cid, "records", str(site.mechanism), q)
    if chain.slots is not None:
        s = chain.slots
        slot = _node(
            g,
            f"slots:{s.collector}",
            "slots",
            f"{s.collector.rsplit('.', 1)[-1]} (sized by {s.sized_by})",
            s.check_at,
            check=_text(s.check),
            finalize_at=_text(s.finalize_at),
        )
        _edge(g, cid, slot, "slots", f"sized by {s.sized_by}", q)
    return cid


def _return_and_concat(g: nx.MultiDiGraph, row: ModelRow, chain: CaptureChain, container: str) -> None:
    """Links 6-7: the states returned by the site's function, then every concatenation they
    may reach; a dropped return ends the path there."""
    site, returns, q = chain.site, chain.returns, row.qualname
    assert site is not None
    owner = site.owner or ""
    kind = returns.kind if returns is not None else None
    if kind in (None, F.ReturnKind.RETURNED):  # one node per capturing function, shared by the models it serves
        rid = _node(
            g,
            f"return:{owner.rpartition('.')[0]}.{site.function}",
            "return",
            f"{site.function} returns aux",
            site.location,
            return_kind=_text(kind),
        )
    else:  # where this model's path drops (or mis-unpacks) the states: its own node
        where = returns.location if returns is not None and returns.location is not None else site.location
        rid = _node(
            g,
            f"return:{where}:{kind}",
            "return",
            f"{kind}: {_text(returns.reason if returns else None)[:80]}",
            where,
            return_kind=str(kind),
        )
    _edge(g, container, rid, "returns", "returned" if kind in (None, F.ReturnKind.RETURNED) else str(kind), q)
    if kind not in (None, F.ReturnKind.RETURNED) or chain.concat is None:
        return
    for location in chain.concat.candidates:
        _edge(g, rid, f"concat:{location}", "concat", "concatenated", q)


def setter_written_holders(g: nx.MultiDiGraph) -> dict[str, set[str]]:
    """Holder class -> the models whose setter chain writes its capture attribute (link 3
    reached through link 2; config builders and dynamic holders are left out)."""
    out: dict[str, set[str]] = {}
    for u, v, data in g.edges(data=True):
        if data.get("link") == "writes" and u.startswith("setter:") and g.nodes[v].get("holder"):
            out.setdefault(g.nodes[v]["holder"], set()).add(data["model"])
    return out


def models_without_site(g: nx.MultiDiGraph) -> set[str]:
    """Models whose setter chain writes a holder's attribute but reaches no capture site:
    link 4 missing after link 3."""
    out = set()
    for u, v, data in g.edges(data=True):
        if data.get("link") != "writes" or not u.startswith("setter:") or not g.nodes[v].get("holder"):
            continue
        model = data["model"]
        if not any(e.get("link") == "site" and e.get("model") == model for _, _, e in g.out_edges(v, data=True)):
            out.add(model)
    return out


def model_subgraph(g: nx.MultiDiGraph, qualname: str) -> nx.MultiDiGraph:
    """One model's path: the edges tagged with that model, plus untagged edges (draft side)
    reachable from them. Other models' parallel edges are left out."""
    import networkx as nx

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
    import networkx as nx

    data = nx.node_link_data(g, edges="links")
    data["nodes"] = sorted(data["nodes"], key=lambda n: n["id"])
    data["links"] = sorted(data["links"], key=lambda e: (e["source"], e["target"], e.get("label", ""), e.get("key", 0)))
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def to_graphml(g: nx.MultiDiGraph) -> str:
    import networkx as nx

    return "\n".join(nx.generate_graphml(g, prettyprint=True)) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(g: nx.MultiDiGraph) -> str:
    shapes = {
        "config": "note",
        "model": "box3d",
        "setter": "box",
        "attribute": "cylinder",
        "loop": "component",
        "container": "folder",
        "slots": "tab",
        "return": "cds",
        "concat": "trapezium",
        "fc": "doubleoctagon",
    }
    lines = ["digraph flowtrace {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    for node, data in sorted(g.nodes(data=True)):
        label = data.get("label", node)
        if data.get("file"):
            label = f"{label}\n{data['file']}:{data['line']}"
        lines.append(
            f"  {_dot_quote(node)} [label={_dot_quote(label)}, shape={shapes.get(data.get('kind'), 'ellipse')}];"
        )
    for u, v, data in sorted(g.edges(data=True), key=lambda e: (e[0], e[1], e[2].get("label", ""))):
        lines.append(f"  {_dot_quote(u)} -> {_dot_quote(v)} [label={_dot_quote(data.get('label', ''))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
