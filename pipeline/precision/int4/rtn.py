"""int4 round-to-nearest without ModelOpt (calibration.streaming): the graph ModelOpt's
`rtn_dq` writes, made from the fp32 graph without its weights, one weight read at a time.

Each MatMul/Gemm whose B is a 2-D initializer reads it through a DequantizeLinear of an
INT4 initializer, blocked along the reduction axis (axis 0, precision.block_size): each
block's scale is max |w| / 7 and each weight round(w / scale) clipped to [-8, 7], as
ModelOpt computes them (the tests compare the two bit for bit). With
precision.int4_embeddings an embedding table (a Gather of a 2-D initializer) is blocked
along its hidden axis (axis 1). The names are ModelOpt's, so either graph reads the same."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.precision.common import streamed
from pipeline.precision.int4.graphs import WEIGHT_INPUT

if TYPE_CHECKING:
    from onnx import ModelProto

INT4_MAX = 7.0
INT4_MIN = -8.0
CLIP_MIN = 1e-5  # ModelOpt's (quant_utils.CLIP_MIN)
OPSET = 21  # blocked DequantizeLinear


def graph(
    source: ModelProto,
    base: Path | None,
    block_size: int,
    exclude: list[str],
    embeddings: bool,
    alphas: dict[str, np.ndarray] | None = None,
) -> Any:
    """A copy of `source` (opset 21 or more, Gemm weights untransposed) with int4 weights.
    `alphas`: AWQ's clip ratios (int4/awq.py); only the GEMM weights it names are
    quantized, each block's scale taken at its ratio of the block's max |w|."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(source)
    inits = {t.name: t for t in m.graph.initializer}
    done: dict[str, str] = {}  # source weight -> its DequantizeLinear output
    dq_nodes = []
    for node in m.graph.node:
        index = WEIGHT_INPUT.get(node.op_type)
        if index is None or (node.op_type == "Gather" and not embeddings):
            continue
        if any(re.match(p, node.name) for p in exclude) or len(node.input) <= index:
            continue
        w = inits.get(node.input[index])
        if w is None or len(w.dims) != 2:
            continue
        gemm = node.op_type != "Gather"
        if alphas is not None and gemm and w.name not in alphas:
            continue
        if w.name not in done:
            alpha = alphas.get(w.name) if alphas is not None and gemm else None
            values = streamed.weight(w, base)
            dq_nodes.append(dequantize(m, w, values, 0 if gemm else 1, block_size, alpha))
            done[w.name] = dq_nodes[-1].output[0]
        node.input[index] = done[w.name]
    # each DequantizeLinear reads initializers only: ahead of every node is a valid order
    nodes = [*dq_nodes, *m.graph.node]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


def dequantize(
    m: ModelProto, w: Any, values: np.ndarray, axis: int, block_size: int, alpha: np.ndarray | None
) -> Any:
    """`w` blocked to int4 along `axis` (its packed values and scales added to `m`), and the
    DequantizeLinear that widens it (not added)."""
    from onnx import TensorProto, helper, numpy_helper

    block = fitting_block(values.shape[axis], block_size)
    q, scale = rtn(values.astype(np.float32, copy=False), axis, block, alpha)
    packed = helper.make_tensor(f"{w.name}_i4", TensorProto.INT4, q.shape, packed_int4(q), raw=True)
    m.graph.initializer.append(packed)
    m.graph.initializer.append(numpy_helper.from_array(scale, f"{w.name}_scale"))
    return helper.make_node(
        "DequantizeLinear",
        [f"{w.name}_i4", f"{w.name}_scale"],
        [f"{w.name}_DequantizeLinear_Output"],
        name=f"{w.name}_DequantizeLinear",
        axis=axis,
        block_size=block,
    )


# The smallest block a weight is cut to before it is one block per column.
MIN_BLOCK = 16


def fitting_block(rows: int, block_size: int) -> int:
    """The block a weight of `rows` along its blocked axis is cut to: `block_size` where it
    divides `rows` or `rows` fits one block, else the largest power of two below it that
    divides `rows`, down to MIN_BLOCK; else one block of every row. TensorRT refuses a
    partial last block among several ("the quantization axis must divide into whole
    blocks"), and shipped widths are not all multiples of 128: SmolLM's hidden is 576, a
    Llama's MLP may be 688."""
    if rows <= block_size:
        return block_size  # one block: as ModelOpt writes it, and as TensorRT reads it
    block = block_size
    while block >= MIN_BLOCK:
        if rows % block == 0:
            return block
        block //= 2
    return rows


def packed_int4(q: np.ndarray) -> bytes:
    """ONNX's INT4 raw bytes: two values a byte, the first in the low nibble. Packed here
    with numpy: onnx.helper packs through Python lists, which for a large weight costs
    tens of bytes a value and minutes."""
    flat = q.ravel().astype(np.uint8) & 0x0F
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()


def rtn(
    w: np.ndarray, axis: int, block_size: int, alpha: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """int4 values (int8 storage) and per-block scales of a 2-D weight, blocked along axis.
    `alpha`: a clip ratio per block, flat in ModelOpt's order (output column major)."""
    moved = np.moveaxis(w, axis, 0)  # blocks along the first axis
    rows = moved.shape[0]
    blocks = -(-rows // block_size)
    padded = np.zeros((blocks * block_size, *moved.shape[1:]), dtype=np.float32)
    padded[:rows] = moved
    amax = np.abs(padded.reshape(blocks, block_size, -1)).max(axis=1)
    if alpha is not None:
        amax = amax * alpha.reshape(amax.shape[::-1]).T
    # ModelOpt's floor on a scale: a block of zeros (or near zeros) still divides
    scale = np.maximum((amax / np.float32(INT4_MAX)).astype(np.float32), np.float32(CLIP_MIN))
    full = np.repeat(scale, block_size, axis=0)[:rows]
    q = np.clip(np.round(moved / full), INT4_MIN, INT4_MAX).astype(np.int8)
    return np.ascontiguousarray(np.moveaxis(q, 0, axis)), np.ascontiguousarray(
        np.moveaxis(scale, 0, axis)
    )
