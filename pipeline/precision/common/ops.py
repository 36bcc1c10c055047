"""What every family of precision transforms does to a graph's structure: which ops are
GEMMs, raising the graph's opset (onnx_model.opset reads it), putting nodes back in an order ONNX accepts
after a transform appended some, and pruning what no output depends on any more."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PipelineError, first_line
from pipeline.graph import onnx_model
from pipeline.graph.onnx_model import opset

if TYPE_CHECKING:
    from onnx import ModelProto

# The ops TensorRT runs in a low type reading a quantized input or weight.
GEMMS = ("MatMul", "Gemm", "Conv", "ConvTranspose")
MATMULS = ("MatMul", "Gemm")


def at_opset(model: ModelProto, need: int, what: str) -> Any:
    """The graph at opset `need` or above, by ONNX's version converter (graph only: weights
    in external data stay on disk)."""
    if opset(model) >= need:
        return model
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, need)
    except Exception as e:
        raise PipelineError(
            f"{what} needs opset {need} for its Q/DQ nodes; ONNX's version converter cannot "
            f"take this opset-{opset(model)} graph there: {first_line(e)}"
        ) from None


def reorder(m: ModelProto) -> None:
    ordered = topological(list(m.graph.node), m)
    del m.graph.node[:]
    m.graph.node.extend(ordered)


def topological(nodes: list[Any], model: ModelProto) -> list[Any]:
    """Nodes ordered so each comes after the producers of its inputs; ties keep the given
    order (the source graph's, with each Q/DQ pair placed after its tensor's producer)."""
    ready = {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer}
    ready.add("")
    waiting: dict[str, list[int]] = defaultdict(list)
    missing = []
    for i, n in enumerate(nodes):
        need = {x for x in n.input if x not in ready}
        missing.append(need)
        for x in need:
            waiting[x].append(i)
    out, queue = [], [i for i, need in enumerate(missing) if not need]

    heapq.heapify(queue)
    while queue:
        i = heapq.heappop(queue)
        out.append(nodes[i])
        for o in nodes[i].output:
            for j in waiting.pop(o, []):
                missing[j].discard(o)
                if not missing[j]:
                    heapq.heappush(queue, j)
    if len(out) != len(nodes):
        # Inputs produced by nothing (an outer scope, a graph already out of order):
        # keep the remaining nodes where they were rather than lose them.
        done = {id(n) for n in out}
        out += [n for n in nodes if id(n) not in done]
    return out


def pruned(model: ModelProto) -> Any:
    """Without the nodes and initializers no output depends on any more."""
    needed = {o.name for o in model.graph.output}
    kept_nodes = []
    for node in reversed(list(model.graph.node)):
        if any(o in needed for o in node.output):
            kept_nodes.append(node)
            needed.update(node_reads(node))
    del model.graph.node[:]
    model.graph.node.extend(reversed(kept_nodes))
    inits = [i for i in model.graph.initializer if i.name in needed]
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    return model


def drop_unread(model: ModelProto, names: set[str]) -> None:
    """The initializers among `names` that nothing reads any more (no node, no subgraph,
    no graph output), out of the graph: a weight a rewritten copy replaced would be written
    to disk and loaded by every session for nothing."""
    unread = names - read_names(model) - {o.name for o in model.graph.output}
    for i in reversed(range(len(model.graph.initializer))):
        if model.graph.initializer[i].name in unread:
            del model.graph.initializer[i]


def read_names(model: ModelProto) -> set[str]:
    """Every tensor a node of the graph reads, inside its subgraphs too."""
    return {x for n in model.graph.node for x in node_reads(n)}


def node_reads(node: Any) -> Iterator[str]:
    """The tensors `node` reads, its subgraphs' (nested ones too) among them: a subgraph
    reads outer-scope tensors by name."""
    yield from (x for x in node.input if x)
    for _, g in onnx_model.subgraphs(node):
        for n in g.node:
            yield from node_reads(n)
