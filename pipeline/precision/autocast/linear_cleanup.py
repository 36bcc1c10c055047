"""ModelOpt AutoCast's dead-end sweep in linear time.

After converting, `PrecisionConverter._cleanup_no_consumer_nodes` (nvidia-modelopt 0.47)
asks, for every output of every node, which nodes consume it, and `get_consumer_nodes`
answers by scanning the whole graph: quadratic in the node count. On DenseNet-121 (about
900 nodes before casts, 3,500 after) that is 49 of AutoCast's 80 s on a 2-core machine,
paid by every fp16/bf16 run and by every quantized run's fp16 reference engine. The same
decision, made from one set of every consumed name, is what this puts in its place while a
conversion runs: the nodes it removes are the ones ModelOpt would remove (it decides every
node on the graph as it was before removing any), so the cast graph is the same, byte for
byte (tests/precision/test_autocast_cleanup.py), and cache entries stay valid. Written here
rather than upstream's fix awaited: pyproject pins ModelOpt to one minor release, and the
method is checked to exist before it is replaced."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

METHOD = "_cleanup_no_consumer_nodes"


def _cleanup_no_consumer_nodes(self: Any) -> None:
    """Remove the nodes none of whose outputs is consumed or a network output."""
    graph = self.model.graph
    network_outputs = {o.name for o in graph.output}
    consumed = {name for node in graph.node for name in node.input}
    dead = [
        node
        for node in graph.node
        if not any(out in network_outputs or out in consumed for out in node.output)
    ]
    for node in dead:
        graph.node.remove(node)


@contextlib.contextmanager
def linear_cleanup() -> Iterator[None]:
    """ModelOpt's PrecisionConverter with the linear sweep, for the block; put back after.
    Where this ModelOpt has no such method, nothing is replaced."""
    from modelopt.onnx.autocast.precisionconverter import PrecisionConverter

    original = PrecisionConverter.__dict__.get(METHOD)
    if original is None:
        yield
        return
    setattr(PrecisionConverter, METHOD, _cleanup_no_consumer_nodes)
    try:
        yield
    finally:
        setattr(PrecisionConverter, METHOD, original)
