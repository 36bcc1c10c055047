"""ModelOpt AutoCast's removal of redundant casts in linear time.

`modelopt.onnx.utils.remove_redundant_casts` (nvidia-modelopt 0.47) walks every Cast and
asks, for each, which nodes consume or produce a tensor; `get_consumer_nodes` and
`get_producer_nodes` answer by scanning the whole graph: quadratic in the node count. On
DenseNet-121 (3,500 nodes after casting) it is 4.6 of AutoCast's 11 s on a 2-core machine;
a decoder of thirty layers has several times the nodes. `remove_redundant_casts` below is
the same loop over the same decisions, each asked of an index of the graph's edges that is
kept as the loop rewires them; ModelOpt's own helpers decide the types and fold the
constants. No node is added or removed until the loop ends (as there), so the index's
graph order is the graph's, and the cast graph is the same, byte for byte
(tests/precision/test_autocast_cleanup.py): cache entries stay valid."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from onnx import TensorProto

# The Cast types a sequential pair may be folded across, widest first: ModelOpt's order,
# which it keeps inside its own _is_sequential_cast, so it is not importable.
_PRECISION_ORDER = (
    TensorProto.DOUBLE,
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.BFLOAT16,
)


class _Edges:
    """Which nodes (by their place in the graph) consume and produce each tensor."""

    def __init__(self, nodes: list[Any]) -> None:
        self.nodes = nodes
        self.place = {id(n): i for i, n in enumerate(nodes)}
        self.consumers: defaultdict[str, set[int]] = defaultdict(set)
        self.producers: defaultdict[str, set[int]] = defaultdict(set)
        for i, node in enumerate(nodes):
            for name in node.input:
                self.consumers[name].add(i)
            for name in node.output:
                self.producers[name].add(i)

    def consuming(self, tensor: str) -> list[Any]:
        return [self.nodes[i] for i in sorted(self.consumers.get(tensor, ()))]

    def producing(self, tensor: str) -> list[Any]:
        return [self.nodes[i] for i in sorted(self.producers.get(tensor, ()))]

    def rename_inputs(self, nodes: list[Any], old: str, new: str) -> None:
        for node in nodes:
            _rename(node.input, old, new)
            i = self.place[id(node)]
            self.consumers[old].discard(i)
            self.consumers[new].add(i)

    def rename_output(self, node: Any, old: str, new: str) -> None:
        if _rename(node.output, old, new):
            i = self.place[id(node)]
            self.producers[old].discard(i)
            self.producers[new].add(i)


def _rename(names: Any, old: str, new: str) -> bool:
    """Each `old` in a node's input or output names (a protobuf list) made `new`."""
    found = False
    for k, name in enumerate(names):
        if name == old:
            names[k] = new
            found = True
    return found


def _is_sequential_cast(node: Any, edges: _Edges) -> bool:
    from modelopt.onnx.utils import get_cast_to_type

    consumers = [n for n in edges.consuming(node.output[0]) if n.op_type == "Cast"]
    if len(consumers) != 1:
        return False
    first, second = get_cast_to_type(node), get_cast_to_type(consumers[0])
    return (
        first in _PRECISION_ORDER
        and second in _PRECISION_ORDER
        and _PRECISION_ORDER.index(first) <= _PRECISION_ORDER.index(second)
    )


def _constant_feeding(node: Any, edges: _Edges) -> Any | None:
    """The Constant node feeding this Cast alone, whose value it can take instead."""
    producers = edges.producing(node.input[0])
    if len(producers) == 1 and producers[0].op_type == "Constant":
        if len(edges.consuming(producers[0].output[0])) == 1:
            return producers[0]
    return None


def _bypass(model: Any, node: Any, edges: _Edges) -> None:
    """ModelOpt's _bypass_cast_node: the Cast's readers read its input instead, or, where
    its output is a network output, its input's producer writes that output."""
    source, target = node.input[0], node.output[0]
    if any(output.name == target for output in model.graph.output):
        for producer in edges.producing(source):  # one, in a valid graph
            edges.rename_output(producer, source, target)
            consumers = edges.consuming(source)
            if len(consumers) > 1:
                edges.rename_inputs(consumers, source, target)
    else:
        edges.rename_inputs(edges.consuming(target), target, source)


def remove_redundant_casts(onnx_model: Any) -> Any:
    """Same-type casts, a cast followed by a narrower one, and casts of a Constant read by
    them alone, removed (ModelOpt's remove_redundant_casts, in linear time)."""
    from modelopt.onnx import utils

    type_map = utils._build_tensor_type_map(onnx_model)
    edges = _Edges(list(onnx_model.graph.node))
    removed = []
    for node in edges.nodes:
        if node.op_type != "Cast":
            continue
        if utils._is_same_type_cast(onnx_model, node, type_map) or _is_sequential_cast(node, edges):
            removed.append(node)
            _bypass(onnx_model, node, edges)
        elif (constant := _constant_feeding(node, edges)) is not None:
            removed.append(node)
            utils._convert_constant_values(onnx_model, constant, node)
            _bypass(onnx_model, node, edges)
    for node in removed:
        onnx_model.graph.node.remove(node)
    return onnx_model
