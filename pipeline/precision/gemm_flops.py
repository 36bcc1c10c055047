"""How much of a graph's matrix arithmetic runs in int8/fp8: the FLOPs of each GEMM and
convolution at the reference batch's shapes, and whether its input is quantized. A count
of quantized nodes hides that one FFN projection can outweigh ten attention MatMuls."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from pipeline.graph import onnx_model
from pipeline.precision.common.ops import GEMMS

if TYPE_CHECKING:
    from onnx import ModelProto


def _shapes(model: ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, list[int]]:
    """Every tensor's shape with the graph inputs fixed to the feeds' shapes."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for inp in m.graph.input:
        if inp.name in feeds:
            dims = inp.type.tensor_type.shape.dim
            for d, size in zip(dims, feeds[inp.name].shape):
                d.Clear()
                d.dim_value = int(size)
    del m.graph.value_info[:]
    try:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    except Exception:  # a custom op without a shape function: what is known stays known
        pass
    out = {}
    for v in [*m.graph.input, *m.graph.value_info, *m.graph.output]:
        dims = v.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            out[v.name] = [d.dim_value for d in dims]
    for init in m.graph.initializer:
        out[init.name] = list(init.dims)
    return out


def node_flops(node: Any, shapes: dict[str, list[int]]) -> int | None:
    """Multiply-adds times two for one GEMM or convolution; None where a shape is unknown."""
    out = shapes.get(node.output[0])
    a = shapes.get(node.input[0])
    b = shapes.get(node.input[1]) if len(node.input) > 1 else None
    if out is None or a is None or b is None:
        return None
    if node.op_type == "MatMul":
        return 2 * math.prod(out) * a[-1]
    if node.op_type == "Gemm":
        trans_a = next((x.i for x in node.attribute if x.name == "transA"), 0)
        return 2 * math.prod(out) * (a[0] if trans_a else a[-1])
    if node.op_type == "Conv":
        return 2 * math.prod(out) * math.prod(b[1:])
    return 2 * math.prod(a) * math.prod(b[1:])  # ConvTranspose: each input scatters a kernel


class GemmFlops(TypedDict):
    """The graph's GEMM FLOPs at the reference batch's shapes (calibration.json's
    calibration.gemm_flops)."""

    gemm_flops: int
    quantized_gemm_flops: int  # of GEMMs reading a quantized input or weight
    quantized_fraction: float | None  # None: no GEMM FLOPs counted
    shapes_of: dict[str, list[int]]  # graph input -> the shape counted at
    nodes_of_unknown_shape: list[str]  # GEMMs left out of the count


def summary(model: ModelProto, feeds: dict[str, np.ndarray]) -> GemmFlops:
    """Total GEMM FLOPs at these shapes and the fraction whose input is quantized."""
    producer = {o: n.op_type for n in model.graph.node for o in n.output}
    shapes = _shapes(model, feeds)
    total = quantized = 0
    unknown = []
    for node in model.graph.node:
        if node.op_type not in GEMMS:
            continue
        flops = node_flops(node, shapes)
        if flops is None:
            unknown.append(node.name)
            continue
        total += flops
        # int8/fp8 quantize the input (and the weight); int4 weight-only, the weight alone
        if any(producer.get(x) == "DequantizeLinear" for x in node.input[:2]):
            quantized += flops
    return {
        "gemm_flops": total,
        "quantized_gemm_flops": quantized,
        "quantized_fraction": round(quantized / total, 4) if total else None,
        "shapes_of": {k: list(v.shape) for k, v in feeds.items()},
        "nodes_of_unknown_shape": unknown,
    }


# ONNX tensor types by the name a GEMM weight's storage is reported under.
STORED_AS = {
    1: "fp32",
    10: "fp16",
    16: "bf16",
    3: "int8",
    2: "int8",
    17: "fp8",
    22: "int4",
    21: "int4",
}
# Nodes a weight passes through between its initializer and its GEMM.
_WEIGHT_PATH = ("DequantizeLinear", "QuantizeLinear", "Cast", "Transpose", "Reshape", "Identity")


class GemmWeights(TypedDict):
    """The GEMM weights' bytes by the type they are stored in (calibration.gemm_weights)."""

    bytes: dict[str, int]  # "fp32", "int8", ... (STORED_AS), "other"
    share: dict[str, float]  # of all GEMM weight bytes; empty where there are none


def weight_bytes(model: ModelProto) -> GemmWeights:
    """The bytes of every GEMM and convolution weight as it is stored in the graph (an int8
    initializer behind a DequantizeLinear counts as int8, an fp16 one behind a Cast as fp16),
    by type, and each type's share: what the engine's weights will weigh, in the graph."""
    inits = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    by_type: dict[str, int] = {}
    seen: set[str] = set()
    for node in model.graph.node:
        if node.op_type not in GEMMS or len(node.input) < 2:
            continue
        x, quantized_to = node.input[1], None
        while x not in inits and x in producer and producer[x].op_type in _WEIGHT_PATH:
            p = producer[x]
            if p.op_type == "QuantizeLinear":  # TensorRT stores Q(constant) in its type
                zero = inits.get(p.input[2]) if len(p.input) > 2 else None
                quantized_to = zero.data_type if zero is not None else 3
            x = p.input[0]
        if x not in inits or x in seen:
            continue  # an activation (attention's two inputs), or a weight counted already
        seen.add(x)
        stored = quantized_to or inits[x].data_type
        kind = STORED_AS.get(stored, "other")
        by_type[kind] = by_type.get(kind, 0) + onnx_model.tensor_bytes(inits[x], stored)
    total = sum(by_type.values())
    return {
        "bytes": by_type,
        "share": {k: round(v / total, 4) for k, v in by_type.items()} if total else {},
    }
