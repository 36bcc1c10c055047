"""ModelOpt AutoCast's dead-end sweep in linear time (and, with linear_casts.py, its removal
of redundant casts: linear_cleanup() puts both in place).

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

METHOD = "_cleanup_no_consumer_nodes"  # PrecisionConverter's dead-end sweep
CASTS = "remove_redundant_casts"  # modelopt.onnx.utils' function, replaced by linear_casts'


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
    """ModelOpt's PrecisionConverter with the linear sweep, and its redundant casts removed
    in linear time (linear_casts.py), for the block; put back after. Where this ModelOpt
    has no such method or function, that one is not replaced."""
    from modelopt.onnx import utils
    from modelopt.onnx.autocast.precisionconverter import PrecisionConverter

    from pipeline.precision.autocast import linear_casts

    with contextlib.ExitStack() as stack:
        if PrecisionConverter.__dict__.get(METHOD) is not None:
            stack.enter_context(_replaced(PrecisionConverter, METHOD, _cleanup_no_consumer_nodes))
        if hasattr(utils, CASTS):
            stack.enter_context(_replaced(utils, CASTS, linear_casts.remove_redundant_casts))
        yield


@contextlib.contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = owner.__dict__[name]
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)
