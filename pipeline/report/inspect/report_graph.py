"""The graphs the report draws: the ONNX graph TensorRT parsed, each node coloured by
the precision it runs at, with repeated blocks (`/layers.0`, `/layers.1`, ...) folded
into one box each; and the engine's own layers where the build says what they are.
Plain data ({nodes, edges}); graph_svg draws it."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.analysis import engine_layers, fusion, node_precision
from pipeline.records.inspect_file import (
    EngineLayer,
    FoldedBlock,
    Graph,
    GraphDetail,
    GraphNode,
    IoTensor,
    NodesAndEdges,
)

if TYPE_CHECKING:
    import onnx

MIN_BLOCK_NODES = 3  # smaller repeats (a Conv and its Relu) read fine unfolded
_NUMBERED = re.compile(r"(.+)\.(\d+)")


def _short(name: str, parts: int = 2) -> str:
    return "/".join([p for p in name.split("/") if p][-parts:]) or name


def block_of(name: str) -> tuple[str, str] | None:
    """(family, instance) for a node inside a numbered module: '/layers.1/qkv/MatMul'
    is in instance '/layers.1' of family '/layers.#'."""
    parts = name.split("/")
    for i, comp in enumerate(parts[:-1]):
        if m := _NUMBERED.fullmatch(comp):
            return "/".join([*parts[:i], m.group(1) + ".#"]), "/".join(parts[: i + 1])
    return None


def live_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes that run: Constants, and nodes fed only by constants (folded by TensorRT), go."""
    const = {i.name for i in model.graph.initializer}
    live = []
    for node in model.graph.node:
        ins = [i for i in node.input if i]
        if node.op_type == "Constant" or (ins and all(i in const for i in ins)):
            const.update(o for o in node.output if o)
        else:
            live.append(node)
    return live


def onnx_graph(
    model: onnx.ModelProto, precision_of: Callable[[str, str], tuple[str, str]], max_nodes: int
) -> Graph:
    """precision_of(node name, first output) -> (precision, where that came from)."""
    nodes: list[GraphNode] = []
    edges: list[tuple[str, str]] = []
    producer: dict[str, str] = {}
    for spec in model.graph.input:
        if spec.name not in {i.name for i in model.graph.initializer}:
            nodes.append(
                {
                    "id": f"in:{spec.name}",
                    "label": spec.name,
                    "kind": "io",
                    "tooltip": f"graph input {spec.name}",
                }
            )
            producer[spec.name] = f"in:{spec.name}"
    for k, node in enumerate(live_nodes(model)):
        nid = f"n{k}:{node.name}"
        name = node.name or (node.output[0] if node.output else f"node {k}")
        prec, source = precision_of(node.name, node.output[0] if node.output else "")
        nodes.append(
            {
                "id": nid,
                "name": name,
                "label": node.op_type,
                "sublabel": _short(name),
                "precision": prec,
                "kind": "op",
                "tooltip": f"{name} ({node.op_type})\nprecision {prec} ({source})",
            }
        )
        for i in node.input:
            if i in producer:
                edges.append((producer[i], nid))
        for o in node.output:
            producer[o] = nid
    for spec in model.graph.output:
        nodes.append(
            {
                "id": f"out:{spec.name}",
                "label": spec.name,
                "kind": "io",
                "tooltip": f"graph output {spec.name}",
            }
        )
        if spec.name in producer:
            edges.append((producer[spec.name], f"out:{spec.name}"))
    return collapse({"nodes": nodes, "edges": edges}, max_nodes)


def _group_node(gid: str, label: str, members: list[GraphNode]) -> GraphNode:
    """A folded block takes the colour of its GEMMs and convolutions, where the work is:
    an int8 transformer layer is mostly fp32 Adds and Q/DQ by count, int8 by arithmetic."""
    mix = engine_layers.histogram(members)
    matrix = [m for m in members if m["label"] in node_precision.MATRIX_OPS]
    top = next(iter(engine_layers.histogram(matrix or members)), "unknown")
    ops = Counter(
        m["label"] for m in members if m["label"] not in fusion.NON_COMPUTE_OPS
    ).most_common(3)
    why = (
        f"coloured by its {len(matrix)} GEMM/convolution nodes"
        if matrix
        else "coloured by most of its nodes"
    )
    return {
        "id": gid,
        "label": label,
        "kind": "group",
        "precision": top,
        "mix": mix,
        "sublabel": f"{len(members)} nodes · " + " ".join(f"{op}×{n}" for op, n in ops),
        "tooltip": f"{label}: {len(members)} nodes folded, {why}\n"
        + ", ".join(f"{p} {n}" for p, n in mix.items()),
    }


def _fold(graph: NodesAndEdges, group_of: dict[str, str], labels: dict[str, str]) -> NodesAndEdges:
    members: defaultdict[str, list[GraphNode]] = defaultdict(list)
    for n in graph["nodes"]:
        if n["id"] in group_of:
            members[group_of[n["id"]]].append(n)
    nodes: list[GraphNode] = []
    seen: set[str] = set()
    for n in graph["nodes"]:
        gid = group_of.get(n["id"])
        if gid is None:
            nodes.append(n)
        elif gid not in seen:
            seen.add(gid)
            nodes.append(_group_node(gid, labels[gid], members[gid]))
    edges = [(group_of.get(u, u), group_of.get(v, v)) for u, v in graph["edges"]]
    edges = [e for e in dict.fromkeys(edges) if e[0] != e[1]]
    return {**graph, "nodes": nodes, "edges": edges}


def collapse(graph: NodesAndEdges, max_nodes: int) -> Graph:
    """Fold every repeated numbered block into one box; if that still leaves more than
    max_nodes boxes, fold by top-level module too; beyond that, draw the first max_nodes."""
    ops = [n for n in graph["nodes"] if n["kind"] == "op"]
    instances: dict[str, dict[str, list[GraphNode]]] = defaultdict(lambda: defaultdict(list))
    for n in ops:
        if b := block_of(n["name"]):
            instances[b[0]][b[1]].append(n)
    group_of: dict[str, str] = {}
    labels: dict[str, str] = {}
    folded: list[FoldedBlock] = []
    details: list[GraphDetail] = []
    for family, inst in instances.items():
        sizes = [len(v) for v in inst.values()]
        if len(inst) < 2 or sorted(sizes)[len(sizes) // 2] < MIN_BLOCK_NODES:
            continue
        folded.append({"family": family, "instances": list(inst), "nodes_each": sizes})
        for prefix, members in inst.items():
            labels[f"g:{prefix}"] = prefix.strip("/")
            for n in members:
                group_of[n["id"]] = f"g:{prefix}"
        first, members = next(iter(inst.items()))
        ids = {n["id"] for n in members}
        details.append(
            {
                "title": f"inside {first} (one of {len(inst)} repeats of {family})",
                "nodes": members,
                "edges": [e for e in graph["edges"] if e[0] in ids and e[1] in ids],
            }
        )
    out = _fold(graph, group_of, labels)
    if len(out["nodes"]) > max_nodes:  # still too many: fold by top-level module
        top: dict[str, str] = {}
        for n in out["nodes"]:
            name = n.get("name") or ""
            parts = [p for p in name.split("/") if p]
            if n["kind"] == "op" and len(parts) > 1:
                top[n["id"]] = f"g:/{parts[0]}"
                labels[f"g:/{parts[0]}"] = parts[0]
        out = _fold(out, top, labels)
    truncated = max(0, len(out["nodes"]) - max_nodes)
    if truncated:
        keep = {n["id"] for n in out["nodes"][:max_nodes]}
        out = {
            **out,
            "nodes": out["nodes"][:max_nodes],
            "edges": [e for e in out["edges"] if e[0] in keep and e[1] in keep],
        }
    return {**out, "folded": folded, "details": details, "truncated": truncated}


def engine_graph(layers: list[EngineLayer], io_tensors: list[IoTensor], max_nodes: int) -> Graph:
    """Engine layers joined by the tensors they pass; layers with no tensors at all
    (shape calls) are left out of the picture."""
    nodes: list[GraphNode] = []
    edges: list[tuple[str, str]] = []
    producer: dict[str, str] = {}
    for t in io_tensors:
        if t.get("mode") in (None, "Input"):
            nodes.append(
                {
                    "id": f"in:{t['name']}",
                    "label": t["name"],
                    "kind": "io",
                    "tooltip": f"engine input {t['name']}",
                }
            )
            producer[t["name"]] = f"in:{t['name']}"
    drawn = [l for l in layers if l["inputs"] or l["outputs"]][:max_nodes]
    for k, l in enumerate(drawn):
        nid = f"l{k}"
        nodes.append(
            {
                "id": nid,
                "name": l["name"],
                "label": l["type"] or "layer",
                "sublabel": _short(l["name"], 1),
                "precision": l["precision"],
                "kind": "op",
                "tooltip": f"{l['name']}\n{l['type']} · {l['precision']} · tactic {l.get('tactic')}\n"
                f"ONNX: {', '.join(l['onnx_nodes']) or '-'}",
            }
        )
        for lt in l["inputs"]:
            if lt["name"] in producer:
                edges.append((producer[lt["name"]], nid))
        for lt in l["outputs"]:
            producer[lt["name"]] = nid
    for t in io_tensors:
        if t.get("mode") == "Output":
            nodes.append(
                {
                    "id": f"out:{t['name']}",
                    "label": t["name"],
                    "kind": "io",
                    "tooltip": f"engine output {t['name']}",
                }
            )
            if t["name"] in producer:
                edges.append((producer[t["name"]], f"out:{t['name']}"))
    return {
        "nodes": nodes,
        "edges": edges,
        "folded": [],
        "details": [],
        "truncated": max(0, len([l for l in layers if l["inputs"] or l["outputs"]]) - max_nodes),
    }
