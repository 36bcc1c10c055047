"""Embedding tables of a quantized graph in the cheapest type that passes the gate.

A `Gather` over a constant table (token, position and type embeddings) is no GEMM: int8,
int4 and precision=auto leave it in fp32, and in a sentence encoder of MiniLM's size that
table is half the weights: the quantized engine came out larger than the fp16 one (89 MB
against 74 MB). In int4 (blocked along the hidden axis, a Gather over a DequantizeLinear, as
ModelOpt writes int4 embeddings), where the graph may hold int4; else in fp16, widened after
the rows are gathered; each graph judged as written before it is kept."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from onnx import ModelProto

# Tables smaller than this are left as they are: a few KB are not worth a Cast layer.
MIN_TABLE_BYTES = 64 << 10


def candidates(model: ModelProto) -> list[str]:
    """fp32 initializers of MIN_TABLE_BYTES or more read as the data of Gather nodes and
    otherwise only by a tied head's Transpose (graph/tied_weights.py)."""
    from onnx import TensorProto

    from pipeline.graph import onnx_model

    inits = {i.name: i for i in model.graph.initializer}
    readers = _readers(model)
    return [
        name
        for name, init in inits.items()
        if init.data_type == TensorProto.FLOAT
        and onnx_model.tensor_bytes(init) >= MIN_TABLE_BYTES
        and any(n.op_type == "Gather" for n, _ in readers.get(name, []))
        and all(_reads_table(n, i) for n, i in readers[name])
    ]


def _readers(model: ModelProto) -> dict[str, list[tuple[Any, int]]]:
    readers: dict[str, list[tuple[Any, int]]] = {}
    for node in model.graph.node:
        for i, x in enumerate(node.input):
            readers.setdefault(x, []).append((node, i))
    return readers


def _reads_table(node: Any, index: int) -> bool:
    from pipeline.graph import tied_weights

    return (node.op_type == "Gather" and index == 0) or tied_weights.is_tie(node)


def in_int4(model: ModelProto, names: list[str], base: Path | None, block_size: int) -> Any:
    """`model` with each named table in int4, blocks of `block_size` along its hidden axis,
    each Gather (and a tied head's Transpose) reading it through a blocked
    DequantizeLinear (opset 21)."""
    from pipeline.precision.common import ops, streamed
    from pipeline.precision.int4 import rtn

    wanted = set(names)
    inits = {i.name: i for i in model.graph.initializer}
    widened = {}
    for name in names:
        values = streamed.weight(inits[name], base)
        dq = rtn.dequantize(model, inits[name], values, 1, block_size, None)
        model.graph.node.append(dq)
        widened[name] = dq.output[0]
    kept = [i for i in model.graph.initializer if i.name not in wanted]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    for node in model.graph.node:
        if _reads_table(node, 0) and node.input[0] in wanted:
            node.input[0] = widened[node.input[0]]
    ops.reorder(model)
    return model


def in_fp16(
    model: ModelProto, names: list[str], base: Path | None, copies: Mapping[str, str] | None = None
) -> Any:
    """`model` with each named table stored in fp16 (read from `base`'s files where it is
    kept there) and each Gather over it followed by a Cast back to fp32 under the Gather's
    own output name, so nothing downstream changes; a tied head's Transpose of it feeds its
    MatMuls in fp16 (_gemms_in_fp16), or, where the head's weight is quantized, is widened
    as a Gather is. `copies`: tables the graph already holds in fp16 under another name
    (AutoCast's copy for a tied head), read from there."""
    from onnx import TensorProto, helper, numpy_helper

    from pipeline.precision.common import ops, streamed

    copies = copies or {}
    wanted = set(names)
    inits = {i.name: i for i in model.graph.initializer}
    kept = [i for i in model.graph.initializer if i.name not in wanted]
    halves = [
        numpy_helper.from_array(streamed.weight(inits[n], base).astype(np.float16), f"{n}::fp16")
        for n in names
        if n not in copies
    ]
    del model.graph.initializer[:]
    model.graph.initializer.extend([*kept, *halves])
    heads = []
    readers = _readers(model)
    for node in list(model.graph.node):
        if _reads_table(node, 0) and node.input[0] in wanted:
            node.input[0] = copies.get(node.input[0], f"{node.input[0]}::fp16")
            read = readers.get(node.output[0], [])
            if node.op_type != "Gather" and all(n.op_type == "MatMul" for n, _ in read):
                heads.append(node.output[0])  # a tied head's Transpose: fp16 from here on
                continue
            out = node.output[0]  # a Gather, or a head whose weight is quantized: widened
            node.output[0] = f"{out}::fp16"
            model.graph.node.append(
                helper.make_node(
                    "Cast", [node.output[0]], [out], to=TensorProto.FLOAT, name=f"{out}::widen"
                )
            )
    for weight in heads:
        _gemms_in_fp16(model, weight)
    if heads:  # their recorded fp32 type would now be wrong
        kept_info = [v for v in model.graph.value_info if v.name not in heads]
        del model.graph.value_info[:]
        model.graph.value_info.extend(kept_info)
    ops.reorder(model)
    return model


def _gemms_in_fp16(model: ModelProto, weight: str) -> None:
    """Each MatMul reading `weight` (now fp16) run in fp16: its other input narrowed, its
    output widened back under its own name. Widening the weight instead would have TensorRT
    fold an fp32 copy of the table into the head (a 135 M decoder's int4 engine measured
    280 MB, 113 MB of it that copy); in fp16 the head and the Gather share one table."""
    from onnx import TensorProto, helper

    for node in list(model.graph.node):
        if node.op_type != "MatMul" or weight not in node.input:
            continue
        for i, x in enumerate(node.input):
            if x != weight:
                node.input[i] = f"{x}::fp16_for_{node.name}"
                model.graph.node.append(
                    helper.make_node(
                        "Cast", [x], [node.input[i]], to=TensorProto.FLOAT16, name=node.input[i]
                    )
                )
        out = node.output[0]
        node.output[0] = f"{out}::fp16"
        model.graph.node.append(
            helper.make_node(
                "Cast", [node.output[0]], [out], to=TensorProto.FLOAT, name=f"{out}::widen"
            )
        )


def fp16_copies(model: ModelProto, names: list[str], base: Path | None) -> dict[str, str]:
    """Of the named fp32 tables, those the graph also holds as an fp16 initializer of the
    same shape (AutoCast writes one for a tied head that reads the table): {table: copy}.
    AutoCast's rounding is not numpy's (it lifts the smallest values to fp16's smallest
    subnormal), so a copy is found by closeness within fp16's rounding, not equality."""
    from onnx import TensorProto

    from pipeline.precision.common import streamed

    inits = {i.name: i for i in model.graph.initializer}
    halves = [i for i in inits.values() if i.data_type == TensorProto.FLOAT16 and len(i.dims) == 2]
    found: dict[str, str] = {}
    for name in names:
        same = [h for h in halves if list(h.dims) == list(inits[name].dims)]
        if not same:
            continue
        table = streamed.weight(inits[name], base)
        for h in same:
            half = streamed.weight(h, base).astype(np.float32)
            if np.allclose(half, table, rtol=2.0**-10, atol=float(np.finfo(np.float16).tiny)):
                found[name] = h.name
                break
    return found
