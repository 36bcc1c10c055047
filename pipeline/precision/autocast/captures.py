"""One name per capture: an outer tensor that several subgraphs (an If's two branches, or
Ifs side by side) read is read in each through an Identity of its own, the subgraph's first
node, and the subgraph's nodes read that.

ModelOpt AutoCast (0.47) casts a captured tensor inside each subgraph that reads it and
names the cast after the tensor alone (`<tensor>_subgraph_cast_to_fp32`), so two subgraphs
that capture one tensor get two nodes writing one name, and its checker refuses the graph
(SSA). Silero VAD with its sample rate frozen is such a graph: the LSTM's Ifs capture the
same state in both branches.

The Identity sits inside the subgraph: one in the outer graph, ahead of the If, is lost to
AutoCast's re-sort of that graph. Its range is its input's, so AutoCast gives it the type of
the tensor it reads and casts nothing at the shared name (a producer kept in fp32 by name
or op type while its readers go to fp16 could still collide). TensorRT removes the Identity;
the graph computes exactly what it did."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pipeline.graph import onnx_model

if TYPE_CHECKING:
    from onnx import ModelProto


def one_per_subgraph(model: ModelProto) -> int:
    """Gives each subgraph its own name for every outer tensor it reads where several
    subgraphs read that tensor; returns how many Identity nodes were added."""
    return _renamed(model.graph)


def _renamed(graph: Any) -> int:
    bodies = [body for node in graph.node for _, body in onnx_model.subgraphs(node)]
    reads = {id(body): _captured(body) for body in bodies}
    shared = {x for x, n in Counter(x for r in reads.values() for x in r).items() if n > 1}
    added = 0
    for node in graph.node:
        for where, body in onnx_model.subgraphs(node):
            # inside the subgraph: AutoCast's sort of the outer graph would not keep an
            # outer Identity ahead of the node whose subgraph reads it
            ahead = []
            for x in sorted(reads[id(body)] & shared):
                own = f"{x}::{node.output[0]}::{where}"  # outputs are unique, names may not be
                _rename(body, x, own)
                ahead.append(_identity(x, own))
            nodes = [*ahead, *body.node]
            del body.node[:]
            body.node.extend(nodes)
            added += len(ahead)
    for body in bodies:
        added += _renamed(body)
    return added


def _bodies(node: Any) -> Iterator[Any]:
    return (body for _, body in onnx_model.subgraphs(node))


def _captured(graph: Any) -> set[str]:
    """The outer tensors a subgraph reads, its nested subgraphs' reads among them."""
    local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    local |= {o for n in graph.node for o in n.output}
    reads = {x for n in graph.node for x in n.input if x}
    for n in graph.node:
        for body in _bodies(n):
            reads |= _captured(body)
    return reads - local


def _rename(graph: Any, old: str, new: str) -> None:
    """Every read of `old` in `graph` and its nested subgraphs (names are SSA: nothing in
    them defines `old` again)."""
    for n in graph.node:
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new
        for body in _bodies(n):
            _rename(body, old, new)
    for o in graph.output:  # a branch may return the captured tensor itself
        if o.name == old:
            o.name = new


def _identity(x: str, out: str) -> Any:
    from onnx import helper

    return helper.make_node("Identity", [x], [out], name=f"{out}::capture")
