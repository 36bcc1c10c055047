"""int8 weight-only: the step between int4 and fp16 for a GEMM the int4 fallback search
kept out of int4 (`precision.fallback=auto`).

The kept GEMM reads its source weight through a DequantizeLinear of an INT8 initializer,
one symmetric scale per output channel (max |w| / 127), activations as they were: the
weight-only form TensorRT takes for int8 as for int4, and a GEMM kept this way stores half
the bytes of fp16. No calibration is needed: a weight's own range sets its scales, so the
graph made from the int4 search's source is all this step needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from onnx import ModelProto

INT8_MAX = 127.0
CLIP_MIN = 1e-5  # the scale of an all-zero channel, as int4's (streamed_int4.CLIP_MIN)


def per_channel(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 values and one scale per index of `axis` (the output channel) of a 2-D weight."""
    amax = np.abs(w).max(axis=1 - axis)
    scale = np.maximum((amax / np.float32(INT8_MAX)).astype(np.float32), np.float32(CLIP_MIN))
    shaped = scale.reshape((-1, 1) if axis == 0 else (1, -1))
    q = np.clip(np.round(w / shaped), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, scale


def output_axis(node: Any) -> int:
    """The axis of a GEMM's weight (B) that indexes its outputs: B is [K, N] for MatMul and
    Gemm, [N, K] for a Gemm with transB."""
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    return 0 if node.op_type == "Gemm" and trans_b else 1


def dequantize(model: ModelProto, name: str, values: np.ndarray, axis: int) -> str:
    """Adds `values` in int8 (per output channel along `axis`) and the DequantizeLinear
    that widens them to `model`; returns the widened tensor's name."""
    from onnx import helper, numpy_helper

    q, scale = per_channel(values.astype(np.float32, copy=False), axis)
    model.graph.initializer.append(numpy_helper.from_array(q, f"{name}_i8"))
    model.graph.initializer.append(numpy_helper.from_array(scale, f"{name}_i8_scale"))
    model.graph.node.append(
        helper.make_node(
            "DequantizeLinear",
            [f"{name}_i8", f"{name}_i8_scale"],
            [f"{name}_i8_DequantizeLinear_Output"],
            name=f"{name}_i8_DequantizeLinear",
            axis=axis,
        )
    )
    return f"{name}_i8_DequantizeLinear_Output"
