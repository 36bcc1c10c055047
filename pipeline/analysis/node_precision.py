"""The precision an ONNX node runs at, as the report's graph colours it.

- A matrix node (Conv, MatMul, Gemm, ...) runs at the precision of the engine kernel that
  computes it: among the engine layers whose metadata names the node, the GEMM or
  convolution kernels, narrowest first. An fp32 epilogue, a quantize or a reformat that
  also names the node (Myelin lists a GEMM's node in every kernel around it) does not
  decide: the int8 GEMM does.
- Any other node is fused into some kernel; it computes in the type the TensorRT network
  gives it (strongly typed builds keep it). Reading the kernel instead would colour a
  `Range` int8 because its kernel ends with a quantize.
- Without engine layers that name nodes, the parsed network, then the parser, then ONNX.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from pipeline.analysis import engine_layers
from pipeline.records.inspect_file import EngineLayer

MATRIX_OPS = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "ConvInteger",
        "QLinearConv",
        "MatMul",
        "MatMulInteger",
        "QLinearMatMul",
        "Gemm",
        "Einsum",
        "Attention",
    }
)


def kernel_of(layers: list[EngineLayer]) -> EngineLayer:
    """The layer that does a matrix node's arithmetic, from those that name it."""
    kernels = [
        l for l in layers if engine_layers.is_matrix_kernel(l.get("type", ""), l["name"])
    ] or layers
    order = engine_layers.COMPUTE_ORDER
    return min(
        kernels,
        key=lambda l: order.index(l["precision"]) if l["precision"] in order else len(order),
    )


def resolver(
    ops: dict[str, str],
    layers: list[EngineLayer],
    detailed: bool,
    network: dict[str, str],
    parsed: dict[str, dict[str, str]],
    onnx_dtypes: dict[str, str],
) -> Callable[[str, str], tuple[str, str]]:
    """precision_of(node name, first output) -> (precision, where it came from).
    ops: node name -> op type; network: network layer name -> precision."""
    naming: dict[str, list[EngineLayer]] = defaultdict(list)
    for layer in layers if detailed else []:
        for node in layer["onnx_nodes"]:
            naming[node].append(layer)

    def precision_of(node: str, first_output: str) -> tuple[str, str]:
        if naming.get(node) and ops.get(node) in MATRIX_OPS:
            k = kernel_of(naming[node])
            return k["precision"], f"engine kernel {k['name']}"
        fused = f", fused into {naming[node][0]['name']}" if naming.get(node) else ""
        if node in network:
            return network[node], "TensorRT network" + fused
        if node in parsed:
            return parsed[node]["dtype"], "TensorRT ONNX parser" + fused
        return onnx_dtypes.get(first_output, "unknown"), "ONNX type" + fused

    return precision_of
