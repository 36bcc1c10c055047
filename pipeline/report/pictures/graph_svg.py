"""Draw a directed acyclic graph as one inline SVG, top to bottom, without Graphviz:
the fallback where `dot` is absent (graph_picture chooses).

A small layered layout: longest-path ranks, dummy points on edges that skip ranks (so
they route between boxes, not through them), barycentre sweeps to cut crossings, then
x positions pulled towards neighbours while keeping a minimum gap. Good for the few
hundred boxes a collapsed network has; no JavaScript, no external assets. The SVG
itself comes from templates/graph.svg.j2.

A node is {id, label, sublabel?, tooltip?, precision?, kind: op | group | io, mix?, marked?}
where mix is {precision: count} for a collapsed group (drawn as a stacked bar) and
marked outlines the box in red (a node precision.fallback kept in fp32)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import TypedDict

from pipeline.records.inspect_file import GraphNode
from pipeline.report import templating

SIZES = {"op": (176, 38), "group": (236, 54), "io": (150, 28), "dummy": (0, 0)}
RANK_GAP = 34
NODE_GAP = 22
MARGIN = 16
SWEEPS = 6


def _ranks(ids: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Longest path from the sources; a cycle (possible after collapsing) is broken at
    its earliest node so the drawing still comes out."""
    preds: defaultdict[str, set[str]] = defaultdict(set)
    succs: defaultdict[str, set[str]] = defaultdict(set)
    for u, v in edges:
        if u != v:
            preds[v].add(u)
            succs[u].add(v)
    order = {n: i for i, n in enumerate(ids)}
    indeg = {n: len(preds[n]) for n in ids}
    rank = {n: 0 for n in ids}
    ready = [n for n in ids if indeg[n] == 0]
    done: set[str] = set()
    while len(done) < len(ids):
        if not ready:  # cycle: release the earliest waiting node
            ready = [min((n for n in ids if n not in done), key=order.__getitem__)]
        n = ready.pop(0)
        if n in done:
            continue
        done.add(n)
        for s in sorted(succs[n], key=order.__getitem__):
            if s in done:
                continue
            rank[s] = max(rank[s], rank[n] + 1)
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return rank


def _with_dummies(
    ids: list[str], edges: list[tuple[str, str]], rank: dict[str, int]
) -> tuple[list[list[str]], list[tuple[str, str]], dict[str, int]]:
    """Split every edge that spans several ranks into unit steps through dummy points."""
    chains: list[list[str]] = []
    unit_edges: list[tuple[str, str]] = []
    dummy_rank: dict[str, int] = {}
    for k, (u, v) in enumerate(edges):
        if u == v:
            continue
        if rank[v] <= rank[u]:  # back edge of a broken cycle: drawn straight, not laid out
            chains.append([u, v])
            continue
        chain = [u]
        for r in range(rank[u] + 1, rank[v]):
            d = f"\0d{k}_{r}"
            dummy_rank[d] = r
            chain.append(d)
        chain.append(v)
        chains.append(chain)
        unit_edges += list(itertools.pairwise(chain))
    return chains, unit_edges, dummy_rank


def _order(layers: list[list[str]], unit_edges: list[tuple[str, str]]) -> None:
    up: defaultdict[str, list[str]] = defaultdict(list)
    down: defaultdict[str, list[str]] = defaultdict(list)
    for u, v in unit_edges:
        down[u].append(v)
        up[v].append(u)
    for sweep in range(SWEEPS):
        downward = sweep % 2 == 0
        seq = range(1, len(layers)) if downward else range(len(layers) - 2, -1, -1)
        for i in seq:
            ref = {n: p for p, n in enumerate(layers[i - 1 if downward else i + 1])}
            nbrs = up if downward else down

            def key(
                item: tuple[int, str],
                ref: dict[str, int] = ref,
                nbrs: defaultdict[str, list[str]] = nbrs,
            ) -> float:
                p, n = item
                ps = [ref[m] for m in nbrs[n] if m in ref]
                return (sum(ps) / len(ps)) if ps else p

            layers[i] = [n for _, n in sorted(enumerate(layers[i]), key=key)]


def _width(n: str, kinds: dict[str, str]) -> int:
    return SIZES[kinds.get(n, "dummy")][0]


def _place_x(
    layers: list[list[str]], unit_edges: list[tuple[str, str]], kinds: dict[str, str]
) -> dict[str, float]:
    x: dict[str, float] = {}
    for layer in layers:
        pos = 0.0
        for n in layer:
            w = _width(n, kinds)
            x[n] = pos + w / 2
            pos += w + NODE_GAP
    nbrs: defaultdict[str, list[str]] = defaultdict(list)
    for u, v in unit_edges:
        nbrs[u].append(v)
        nbrs[v].append(u)
    for _ in range(SWEEPS):
        for layer in layers:
            want = [sum(x[m] for m in nbrs[n]) / len(nbrs[n]) if nbrs[n] else x[n] for n in layer]
            placed: list[float] = []
            for i, n in enumerate(layer):  # keep the order, keep the gap
                lo = (
                    placed[-1] + (_width(layer[i - 1], kinds) + _width(n, kinds)) / 2 + NODE_GAP
                    if placed
                    else None
                )
                placed.append(max(want[i], lo) if lo is not None else want[i])
            shift = sum(w - p for w, p in zip(want, placed)) / len(layer)
            for n, p in zip(layer, placed):
                x[n] = p + shift
    left = min(x[n] - _width(n, kinds) / 2 for layer in layers for n in layer)
    return {n: v - left + MARGIN for n, v in x.items()}


class Placement(TypedDict):
    """Where the layered layout puts each box and each edge's dummy points (their centres)."""

    x: dict[str, float]
    y: dict[str, float]
    kinds: dict[str, str]  # box id -> kind, which sets the box's size
    chains: list[list[str]]  # each edge as the points it passes: from, dummies, to
    width: float
    height: float


def layout(nodes: list[GraphNode], edges: list[tuple[str, str]]) -> Placement:
    ids = [n["id"] for n in nodes]
    known = set(ids)
    edges = [(u, v) for u, v in dict.fromkeys(tuple(e) for e in edges) if u in known and v in known]
    kinds = {n["id"]: n.get("kind", "op") for n in nodes}
    rank = _ranks(ids, edges)
    chains, unit_edges, dummy_rank = _with_dummies(ids, edges, rank)
    depth = max([*list(rank.values()), 0]) + 1
    layers: list[list[str]] = [[] for _ in range(depth)]
    for n in ids:
        layers[rank[n]].append(n)
    for d, r in dummy_rank.items():
        layers[r].append(d)
    _order(layers, unit_edges)
    x = _place_x(layers, unit_edges, kinds)
    heights = [max([SIZES[kinds.get(n, "dummy")][1] for n in layer] + [0]) for layer in layers]
    y, top = {}, MARGIN
    for layer, h in zip(layers, heights):
        for n in layer:
            y[n] = top + h / 2
        top += h + RANK_GAP
    width = max([x[n] + _width(n, kinds) / 2 for n in x] + [0]) + MARGIN
    return {
        "x": x,
        "y": y,
        "kinds": kinds,
        "chains": chains,
        "width": width,
        "height": top - RANK_GAP + MARGIN,
    }


def _clip(text: str, width: int, px: float = 6.6, keep_end: bool = True) -> str:
    """Names keep their end (the op), descriptions their start."""
    n = max(4, int((width - 12) / px))
    if len(text) <= n:
        return text
    return "…" + text[-(n - 1) :] if keep_end else text[: n - 1] + "…"


def _path(points: list[tuple[float, float]]) -> str:
    d = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
    for (ax, ay), (bx, by) in itertools.pairwise(points):
        dy = (by - ay) / 2
        d += f" C{ax:.1f},{ay + dy:.1f} {bx:.1f},{by - dy:.1f} {bx:.1f},{by:.1f}"
    return d


class MixSegment(TypedDict):
    """One precision's share of a folded block's stacked bar."""

    precision: str
    count: int
    x: float
    y: float
    w: float


class Box(TypedDict):
    """One node's geometry and text, as graph.svg.j2 draws it."""

    kind: str
    tooltip: str
    x0: float  # the top left corner
    y0: float
    w: int
    h: int
    cx: float
    fill: str
    fg: str  # the text's colour, readable on the fill
    marked: bool
    label: str  # clipped to the box
    label_y: float
    sublabel: str
    sublabel_y: float
    mix: list[MixSegment]


def _box(n: GraphNode, cx: float, cy: float) -> Box:
    """One node's geometry and text, ready for graph.svg.j2."""
    kind = n.get("kind", "op")
    w, h = SIZES[kind]
    fill = "#ffffff" if kind == "io" else templating.colour(n.get("precision"))
    x0, y0 = cx - w / 2, cy - h / 2
    label_y = cy - (4 if n.get("sublabel") else -4) - (6 if kind == "group" else 0)
    mix = templating.ranked(n.get("mix") or {})
    total = sum(c for _, c in mix)
    segments: list[MixSegment] = []
    bx = x0 + 8
    for prec, count in mix if kind == "group" and total else []:
        seg = (w - 16) * count / total
        segments.append(
            {
                "precision": prec,
                "count": count,
                "x": round(bx, 1),
                "y": round(y0 + h - 13, 1),
                "w": round(seg, 1),
            }
        )
        bx += seg
    return {
        "kind": kind,
        "tooltip": n.get("tooltip") or n["label"],
        "x0": round(x0, 1),
        "y0": round(y0, 1),
        "w": w,
        "h": h,
        "cx": round(cx, 1),
        "fill": fill,
        "fg": templating.text_colour(fill),
        "marked": bool(n.get("marked")),
        "label": _clip(n["label"], w, 7.4),
        "label_y": round(label_y, 1),
        "sublabel": _clip(n["sublabel"], w, 6.2, kind != "group") if n.get("sublabel") else "",
        "sublabel_y": round(label_y + 14, 1),
        "mix": segments,
    }


def render(nodes: list[GraphNode], edges: list[tuple[str, str]], svg_id: str = "g") -> str:
    if not nodes:
        return ""
    lay = layout(nodes, edges)
    x, y, kinds = lay["x"], lay["y"], lay["kinds"]
    paths = []
    for chain in lay["chains"]:
        u, v = chain[0], chain[-1]
        hu, hv = SIZES[kinds[u]][1], SIZES[kinds[v]][1]
        paths.append(
            _path(
                [(x[u], y[u] + hu / 2)]
                + [(x[d], y[d]) for d in chain[1:-1]]
                + [(x[v], y[v] - hv / 2)]
            )
        )
    boxes = [_box(n, x[n["id"]], y[n["id"]]) for n in nodes]
    return templating.render(
        "graph.svg.j2",
        svg_id=svg_id,
        width=f"{lay['width']:.0f}",
        height=f"{lay['height']:.0f}",
        paths=paths,
        boxes=boxes,
    )
