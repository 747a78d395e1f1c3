"""Geometry for the HTML report's inline SVG: one model's data-flow subgraph, and boundary strips.

The report must work offline and deterministically, so the graph is laid out here, in Python,
with networkx, instead of by a JavaScript graph library in the browser. The output is plain
geometry (boxes, paths, label positions); the jinja template turns it into SVG elements, so
every string taken from the scanned code goes through the template's autoescaping and nothing
here builds markup.

Layout is layered left to right, the way data flows (config key -> setter -> attribute -> loop
-> container -> return -> concat -> fc): strongly connected components are collapsed, each
node's column is its longest-path depth, and rows inside a column are ordered by a few
barycenter sweeps to reduce crossings. Every tie is broken by the node key, so the same graph
always gives the same picture.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

import networkx as nx

# Reading order of node kinds, used to break ties and to order isolated nodes.
KIND_ORDER = ("config", "model", "setter", "attribute", "loop", "container", "return", "concat", "fc")

NODE_H = 50.0
ROW_GAP = 22.0
COL_GAP = 48.0
MARGIN = 14.0
CHAR_W = 6.7  # advance of the 11px monospace label font
LINE_MAX = 28  # characters per label line; two lines at most
MAX_NODES = 80  # a model's subgraph past this is cut (and says so): a report must stay readable


@dataclass(frozen=True, slots=True)
class PlacedNode:
    key: str
    kind: str
    label: str
    lines: tuple[str, ...]  # label wrapped (and cut) to fit the box; ``label`` goes in the tooltip
    file: str | None
    line: int | None
    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True, slots=True)
class PlacedEdge:
    source: str
    target: str
    label: str
    short: str  # label cut to 30 characters for display
    path: str  # SVG path data
    arrow: str  # SVG polygon points of the arrowhead
    lx: float
    ly: float
    lw: float  # width of the label's background box


@dataclass(frozen=True, slots=True)
class GraphLayout:
    width: float
    height: float
    nodes: tuple[PlacedNode, ...]
    edges: tuple[PlacedEdge, ...]
    truncated: int  # nodes left out because the subgraph was larger than MAX_NODES


@dataclass(frozen=True, slots=True)
class StripCell:
    boundary: int
    x: float
    hit: bool
    order: int | None  # position of this boundary in the captured layout (0-based), if captured


@dataclass(frozen=True, slots=True)
class StripRow:
    label: str
    y: float
    cells: tuple[StripCell, ...]
    outside: tuple[int, ...]  # boundaries that do not exist for this L (never captured)


@dataclass(frozen=True, slots=True)
class BoundaryStrip:
    """One row of cells per layout, cell b = boundary b, so layouts line up for comparison."""

    num_layers: int
    cell_w: float
    label_w: float
    width: float
    height: float
    rows: tuple[StripRow, ...]
    ticks: tuple[tuple[int, float], ...]


def fmt(v: float) -> str:
    """Fixed one-decimal formatting: byte-identical output across platforms and runs."""
    return f"{v:.1f}"


def _node_key(raw: Any) -> str:
    """node-link ids may be strings, numbers or lists; one canonical string per node."""
    if isinstance(raw, str):
        return raw
    return json.dumps(raw, sort_keys=True)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _location(data: dict[str, Any]) -> tuple[str | None, int | None]:
    """graph.py writes ``file=""``, ``line=0`` for nodes without a place; treat them as none."""
    file = data.get("file") or None
    line = data.get("line")
    if not isinstance(line, int) or isinstance(line, bool) or line <= 0:
        line = None
    return (str(file) if file is not None else None), line


def parse_graph(data: dict[str, Any]) -> nx.MultiDiGraph:
    """node-link JSON (``links`` or networkx>=3.4's ``edges`` key) -> MultiDiGraph with string keys."""
    g = nx.MultiDiGraph()
    for node in data.get("nodes") or []:
        if not isinstance(node, dict) or "id" not in node:
            continue
        attrs = {k: v for k, v in node.items() if k != "id"}
        g.add_node(_node_key(node["id"]), **attrs)
    links = data.get("links")
    if links is None:
        links = data.get("edges") or []
    for link in links:
        if not isinstance(link, dict) or "source" not in link or "target" not in link:
            continue
        u, v = _node_key(link["source"]), _node_key(link["target"])
        for n in (u, v):
            if n not in g:
                g.add_node(n, kind="", label=n)
        g.add_edge(u, v, label=_text(link.get("label")), model=link.get("model") or None)
    return g


def model_subgraph(g: nx.MultiDiGraph, qualname: str, limit: int = MAX_NODES) -> tuple[nx.MultiDiGraph, int]:
    """The part of the repo graph that belongs to one model class.

    Edges tagged ``model=qualname`` and nodes tagged with it are the model's own; untagged
    edges (the draft side: concat -> fc) are followed forward from there. Edges tagged with
    another model are never followed, so a shared setter or config key does not drag in every
    class that inherits it. Returns the subgraph and how many nodes were cut by ``limit``.
    """
    sub = nx.MultiDiGraph()
    seeds: list[str] = []
    for node, data in sorted(g.nodes(data=True)):
        if data.get("model") == qualname:
            seeds.append(node)
    own_edges = sorted(
        ((u, v, d) for u, v, d in g.edges(data=True) if d.get("model") == qualname),
        key=lambda e: (e[0], e[1], e[2].get("label", "")),
    )
    for u, v, _ in own_edges:
        seeds.extend((u, v))
    order = list(dict.fromkeys(seeds))
    kept = set(order[:limit])
    for u, v, d in own_edges:
        if u in kept and v in kept:
            sub.add_edge(u, v, **d)
    for n in order[:limit]:
        sub.add_node(n)
    frontier = sorted(kept)
    cut = max(0, len(order) - limit)
    while frontier:
        node = frontier.pop(0)
        for _, nxt, d in sorted(g.out_edges(node, data=True), key=lambda e: (e[1], e[2].get("label", ""))):
            if d.get("model"):
                continue
            if nxt not in sub:
                if sub.number_of_nodes() >= limit:
                    cut += 1
                    continue
                sub.add_node(nxt)
                frontier.append(nxt)
            if not any(dd.get("label") == d.get("label") for dd in (sub.get_edge_data(node, nxt) or {}).values()):
                sub.add_edge(node, nxt, **d)
    for n in sub.nodes:
        sub.nodes[n].update(g.nodes[n])
    return sub, cut


def collapse_config_readers(g: nx.MultiDiGraph) -> nx.MultiDiGraph:
    """Fold the places that read a layer-id key into one node per key.

    A config key fans out to every function that reads it (nine in SGLang 0.5.23, most of
    them in the runner, not in the model); drawn one by one they push the model's own chain
    off the picture. Readers are the config nodes a ``read`` edge leads to that lead nowhere;
    two or more become one node, "read in N places", whose label names the functions.
    """
    out = g.copy()
    for key in sorted(n for n, d in g.nodes(data=True) if d.get("kind") == "config"):
        found = {
            v
            for _, v, d in g.out_edges(key, data=True)
            if d.get("label") == "read"
            and g.nodes[v].get("kind") == "config"
            and g.out_degree(v) == 0
            and g.in_degree(v) == 1
        }
        readers = sorted(found, key=lambda v: (*_sort_location(g.nodes[v]), v))  # reading order
        if len(readers) < 2:
            continue
        functions = list(dict.fromkeys(_reader_function(_text(g.nodes[r].get("label"))) for r in readers))
        shown = ", ".join(functions[:3]) + (f", +{len(functions) - 3} more" if len(functions) > 3 else "")
        node = f"readers:{key}"
        out.remove_nodes_from(readers)
        out.add_node(node, kind="config", label=f"read in {len(readers)} places: {shown}", file="", line=0, model="")
        out.add_edge(key, node, label="read", model=None)
    return out


def _sort_location(data: dict[str, Any]) -> tuple[str, int]:
    file, line = _location(data)
    return file or "", line or 0


def _reader_function(label: str) -> str:
    """``read KEY (Class.function)`` -> ``Class.function``."""
    return label[label.rfind("(") + 1 : -1] if label.endswith(")") and "(" in label else label


def _label_w(label: str) -> float:
    """Width of an edge label's background box (10px monospace, cut to 30 characters)."""
    return len(_shorten(label, 30)) * 6.1 + 8.0 if label else 0.0


def _kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def _shorten(label: str, limit: int) -> str:
    label = " ".join(label.split())
    return label if len(label) <= limit else label[: limit - 1] + "…"


def wrap_label(label: str, width: int = LINE_MAX) -> tuple[str, ...]:
    """Two lines at most, broken after a ``.``, space, ``(`` or ``_`` near the width, so that
    ``AlphaForCausalLM.set_eagle3_layers_to_capture`` splits at the dot, not mid-word."""
    label = " ".join(label.split())
    if len(label) <= width:
        return (label,)
    cut = -1
    for group in (". ", "(,", "_"):
        cut = max(label.rfind(ch, width // 3, width) for ch in group)
        if cut > 0:
            break
    cut = cut + 1 if cut > 0 else width
    first, rest = label[:cut].rstrip(), label[cut:].lstrip()
    return (first, _shorten(rest, width))


def _columns(g: nx.MultiDiGraph) -> dict[str, int]:
    """Longest-path depth of every node, on the condensation so that cycles cannot loop."""
    simple = nx.DiGraph()
    simple.add_nodes_from(sorted(g.nodes))
    simple.add_edges_from(sorted((u, v) for u, v in g.edges() if u != v))
    cond = nx.condensation(simple)
    depth: dict[int, int] = {}
    for c in nx.lexicographical_topological_sort(cond, key=lambda c: min(cond.nodes[c]["members"])):
        preds = list(cond.predecessors(c))
        depth[c] = 1 + max(depth[p] for p in preds) if preds else 0
    mapping = cond.graph["mapping"]
    return {n: depth[mapping[n]] for n in g.nodes}


def _barycenter_sweeps(g: nx.MultiDiGraph, columns: list[list[str]]) -> None:
    """Reorder ``columns`` in place to reduce edge crossings, a phase of its own because it
    only permutes rows and needs nothing of the geometry placed after it.

    Barycenter sweeps: order each column by the mean row of its neighbours in the previous
    (then next) column. Stable sorts keep the deterministic initial order for ties."""
    ncols = len(columns)

    def sweep(forward: bool) -> None:
        rng = range(1, ncols) if forward else range(ncols - 2, -1, -1)
        for c in rng:
            ref = columns[c - 1] if forward else columns[c + 1]
            pos = {n: i for i, n in enumerate(ref)}
            here = {n: i for i, n in enumerate(columns[c])}

            def bary(n: str) -> float:
                nbrs = g.predecessors(n) if forward else g.successors(n)
                rows = [pos[m] for m in nbrs if m in pos]
                return sum(rows) / len(rows) if rows else float(here[n])

            columns[c].sort(key=bary)

    for _ in range(3):
        sweep(True)
        sweep(False)


def layout_graph(g: nx.MultiDiGraph, truncated: int = 0) -> GraphLayout | None:
    """Place the nodes in columns and route edges as cubic curves; None for an empty graph."""
    if g.number_of_nodes() == 0:
        return None
    col = _columns(g)
    ncols = max(col.values()) + 1
    columns: list[list[str]] = [[] for _ in range(ncols)]
    for n in sorted(
        g.nodes, key=lambda n: (_kind_rank(_text(g.nodes[n].get("kind"))), _text(g.nodes[n].get("label")), n)
    ):
        columns[col[n]].append(n)

    _barycenter_sweeps(g, columns)

    widths: dict[str, float] = {}
    wrapped: dict[str, tuple[str, ...]] = {}
    for n in g.nodes:
        label = _text(g.nodes[n].get("label")) or n
        wrapped[n] = wrap_label(label)
        kind = _text(g.nodes[n].get("kind"))
        widths[n] = max(96.0, CHAR_W * max(*(len(t) for t in wrapped[n]), len(kind) + 2) + 20.0)
    col_w = [max(widths[n] for n in column) if column else 0.0 for column in columns]
    tallest = max(len(column) for column in columns)
    height = 2 * MARGIN + tallest * NODE_H + (tallest - 1) * ROW_GAP

    # Each gap is wide enough for the labels of the edges crossing it (between adjacent columns).
    gaps = [COL_GAP] * ncols
    for u, v, data in g.edges(data=True):
        if col[v] == col[u] + 1:
            gaps[col[u]] = max(gaps[col[u]], _label_w(_text(data.get("label"))) + 28.0)

    placed: dict[str, PlacedNode] = {}
    x = MARGIN
    for c, column in enumerate(columns):
        block = len(column) * NODE_H + (len(column) - 1) * ROW_GAP
        y = (height - block) / 2
        for n in column:
            data = g.nodes[n]
            file, line = _location(data)
            w = widths[n]
            placed[n] = PlacedNode(
                key=n,
                kind=_text(data.get("kind")),
                label=_text(data.get("label")) or n,
                lines=wrapped[n],
                file=file,
                line=line,
                x=round(x + (col_w[c] - w) / 2, 1),
                y=round(y, 1),
                w=round(w, 1),
                h=NODE_H,
            )
            y += NODE_H + ROW_GAP
        x += col_w[c] + gaps[c]
    width = x - gaps[-1] + MARGIN

    edges: list[PlacedEdge] = []
    seen: dict[tuple[str, str], int] = {}
    labelled: set[tuple[str, str, str]] = set()
    for u, v, data in sorted(g.edges(data=True), key=lambda e: (e[0], e[1], _text(e[2].get("label")))):
        a, b = placed[u], placed[v]
        k = seen.get((u, v), 0)
        seen[(u, v)] = k + 1
        label = _text(data.get("label"))
        # A fan of edges with one label ("read" x 8 from a config key) is labelled once.
        if label and ((u, "out", label) in labelled or (v, "in", label) in labelled):
            label = ""
        elif label:
            labelled.update({(u, "out", label), (v, "in", label)})
        bend = 14.0 * k
        if col[v] > col[u]:
            x0, y0 = a.x + a.w, a.y + a.h / 2 + bend / 2
            x1, y1 = b.x, b.y + b.h / 2 + bend / 2
            dx = max(30.0, (x1 - x0) / 2)
            c0, c1 = (x0 + dx, y0 + bend), (x1 - dx, y1 + bend)
        else:  # same column or backwards: loop below both boxes
            x0, y0 = a.x + a.w / 2, a.y + a.h
            x1, y1 = b.x + b.w / 2 + 6.0, b.y + b.h
            drop = 40.0 + bend
            c0, c1 = (x0, max(y0, y1) + drop), (x1, max(y0, y1) + drop)
            height = max(height, max(y0, y1) + drop + MARGIN)
        path = f"M{fmt(x0)},{fmt(y0)} C{fmt(c0[0])},{fmt(c0[1])} {fmt(c1[0])},{fmt(c1[1])} {fmt(x1)},{fmt(y1)}"
        edges.append(
            PlacedEdge(
                source=u,
                target=v,
                label=label,
                short=_shorten(label, 30),
                path=path,
                arrow=_arrowhead(c1, (x1, y1)),
                lx=round(0.125 * x0 + 0.375 * c0[0] + 0.375 * c1[0] + 0.125 * x1, 1),
                ly=round(0.125 * y0 + 0.375 * c0[1] + 0.375 * c1[1] + 0.125 * y1, 1),
                lw=round(_label_w(label), 1),
            )
        )
    return GraphLayout(
        width=round(width, 1),
        height=round(height, 1),
        nodes=tuple(placed[n] for column in columns for n in column),
        edges=tuple(edges),
        truncated=truncated,
    )


def _arrowhead(control: tuple[float, float], tip: tuple[float, float], size: float = 7.0) -> str:
    """A small triangle at ``tip`` pointing along the curve's last tangent (no SVG marker ids,
    which would have to be unique across the many SVGs of one page)."""
    dx, dy = tip[0] - control[0], tip[1] - control[1]
    norm = (dx * dx + dy * dy) ** 0.5 or 1.0
    ux, uy = dx / norm, dy / norm
    bx, by = tip[0] - ux * size, tip[1] - uy * size
    px, py = -uy * size * 0.5, ux * size * 0.5
    return f"{fmt(tip[0])},{fmt(tip[1])} {fmt(bx + px)},{fmt(by + py)} {fmt(bx - px)},{fmt(by - py)}"


def boundary_strip(num_layers: int, rows: Iterable[tuple[str, Iterable[Any]]]) -> BoundaryStrip | None:
    """Cells for boundaries 0..L, one row per layout (e.g. predicted vs observed by the probe).

    Boundaries past L (or negative, or not integers) cannot be captured for this depth; they are
    reported in ``outside`` instead of being drawn.
    """
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 0 or num_layers > 4096:
        return None
    n = num_layers + 1
    cell_w = round(max(3.0, min(16.0, 720.0 / n)), 1)
    label_w = 86.0
    out_rows: list[StripRow] = []
    y = 4.0
    for label, bs in rows:
        order: dict[int, int] = {}
        outside: list[int] = []
        for i, b in enumerate(bs or ()):
            if isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= num_layers:
                order.setdefault(b, i)
            else:
                outside.append(b)
        cells = tuple(
            StripCell(boundary=b, x=round(label_w + b * cell_w, 1), hit=b in order, order=order.get(b))
            for b in range(n)
        )
        out_rows.append(StripRow(label=label, y=y, cells=cells, outside=tuple(outside)))
        y += 22.0
    if not out_rows:
        return None
    step = 1 if n <= 13 else 5 if n <= 41 else 10 if n <= 121 else 50
    ticks = [t for t in range(0, num_layers, step) if num_layers - t >= step / 2] + [num_layers]
    tick_xy = tuple((b, round(label_w + b * cell_w + cell_w / 2, 1)) for b in ticks)
    return BoundaryStrip(
        num_layers=num_layers,
        cell_w=round(cell_w, 1),
        label_w=label_w,
        width=round(label_w + n * cell_w + 12.0, 1),
        height=round(y + 16.0, 1),
        rows=tuple(out_rows),
        ticks=tick_xy,
    )
