"""Embedding tables of a quantized graph in the cheapest type that passes the gate.

A `Gather` over a constant table (token, position and type embeddings) is no GEMM: int8,
int4 and precision=auto leave it in fp32, and in a sentence encoder of MiniLM's size that
table is half the weights: the quantized engine came out larger than the fp16 one (89 MB
against 74 MB). In int4 (blocked along the hidden axis, a Gather over a DequantizeLinear, as
ModelOpt writes int4 embeddings), where the graph may hold int4; else in fp16, widened after
the rows are gathered; each graph judged as written before it is kept."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from onnx import ModelProto

# Tables smaller than this are left as they are: a few KB are not worth a Cast layer.
MIN_TABLE_BYTES = 64 << 10


def candidates(model: ModelProto) -> list[str]:
    """fp32 initializers read only as the data of Gather nodes, of MIN_TABLE_BYTES or more."""
    from onnx import TensorProto

    from pipeline.graph import onnx_model

    inits = {i.name: i for i in model.graph.initializer}
    readers: dict[str, list[tuple[Any, int]]] = {}
    for node in model.graph.node:
        for i, x in enumerate(node.input):
            readers.setdefault(x, []).append((node, i))
    return [
        name
        for name, init in inits.items()
        if init.data_type == TensorProto.FLOAT
        and onnx_model.tensor_bytes(init) >= MIN_TABLE_BYTES
        and readers.get(name)
        and all(n.op_type == "Gather" and i == 0 for n, i in readers[name])
    ]


def in_int4(model: ModelProto, names: list[str], base: Path | None, block_size: int) -> Any:
    """`model` with each named table in int4, blocks of `block_size` along its hidden axis,
    each Gather reading it through a blocked DequantizeLinear (opset 21)."""
    from pipeline.precision.common import ops, streamed
    from pipeline.precision.int4 import rtn as streamed_int4

    wanted = set(names)
    inits = {i.name: i for i in model.graph.initializer}
    widened = {}
    for name in names:
        values = streamed.weight(inits[name], base)
        dq = streamed_int4.dequantize(model, inits[name], values, 1, block_size, None)
        model.graph.node.append(dq)
        widened[name] = dq.output[0]
    kept = [i for i in model.graph.initializer if i.name not in wanted]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    for node in model.graph.node:
        if node.op_type == "Gather" and node.input[0] in wanted:
            node.input[0] = widened[node.input[0]]
    ops.reorder(model)
    return model


def in_fp16(model: ModelProto, names: list[str], base: Path | None) -> Any:
    """`model` with each named table stored in fp16 (read from `base`'s files where it is
    kept there) and each Gather over it followed by a Cast back to fp32 under the Gather's
    own output name, so nothing downstream changes."""
    from onnx import TensorProto, helper, numpy_helper

    from pipeline.precision.common import ops, streamed

    wanted = set(names)
    inits = {i.name: i for i in model.graph.initializer}
    kept = [i for i in model.graph.initializer if i.name not in wanted]
    halves = [
        numpy_helper.from_array(streamed.weight(inits[n], base).astype(np.float16), f"{n}::fp16")
        for n in names
    ]
    del model.graph.initializer[:]
    model.graph.initializer.extend([*kept, *halves])
    for node in list(model.graph.node):
        if node.op_type == "Gather" and node.input[0] in wanted:
            out = node.output[0]
            node.input[0] = f"{node.input[0]}::fp16"
            node.output[0] = f"{out}::fp16"
            model.graph.node.append(
                helper.make_node(
                    "Cast", [node.output[0]], [out], to=TensorProto.FLOAT, name=f"{out}::widen"
                )
            )
    ops.reorder(model)
    return model
