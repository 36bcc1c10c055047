"""int8/fp8 scales without ModelOpt (calibration.streaming): the QdqPlan ModelOpt's max or
entropy calibration would give for every GEMM input, made from the fp32 graph without its weights.

- Activations (a GEMM input no initializer holds): one scale per tensor, its range over
  the calibration batches (max |x|, or entropy's threshold: calibration/ranges.py) / 127.
- Weights: one scale per output channel, max |w| / 127, read one weight at a time; the
  channel axis is the one ONNX Runtime's quantizer uses (MatMul B: 1, Gemm B: 0 when
  transB else 1, Conv W: 0, ConvTranspose W: 1).
- A tied LM head's weight (the Transpose of the token table that graph/tied_weights.py
  reads it through) is a weight too, scaled per channel from the table. ModelOpt sees a
  computed tensor and calibrates it as an activation: one entropy-clipped scale for 49k
  vocabulary rows, and the same 108 MiB taken as an output of every batch (most of a
  135 M decoder's calibration peak). weigh_tied_heads() gives ModelOpt's plan the same
  scales, so both ways still make one graph.
- A Softmax output takes the range [0, 1], as ONNX Runtime's quantizer fixes it.
- fp8 takes ModelOpt's conversion of those scales (x 448 / 127) and fp8 zero points.

Only GEMM inputs: the edges qdq_placement=gemm_inputs admits, less the GEMMs ModelOpt
leaves unquantized because TensorRT's int8/fp8 kernels gain nothing there (excluded(): a
GEMV, K or N under 16, a Conv of few channels). ModelOpt's attention rules (int8 attention
MatMuls past 512 tokens, fp8 head sizes) are not ported: calibration.exclude_nodes names
such MatMuls. The tests check the edges and scales against ModelOpt's on the bundled models."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import NothingToQuantize
from pipeline.graph import onnx_model, tied_weights
from pipeline.precision.calibration import cache, ranges
from pipeline.precision.common import ops, streamed
from pipeline.precision.qdq.plan import QdqPlan, QSpec, constants, materialize

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.core.config import CalibrationConfig
    from pipeline.inputs.calibration_data import CalibrationSet
    from pipeline.store import FileData

# Symmetric int8 as ONNX Runtime quantizes it: [-127, 127].
INT8_MAX = np.float32(127.0)
FP8_MAX = np.float32(448.0)
# The output-channel axis of each GEMM's weight input, as ONNX Runtime's per-channel
# quantizer picks it (Gemm: by transB).
WEIGHT_AXIS = {"MatMul": 1, "Conv": 0, "ConvTranspose": 1}


def plan(
    source: ModelProto,
    base: Path | None,
    mode: str,
    method: str,
    batches: list[dict[str, np.ndarray]],
    calibration_cfg: CalibrationConfig,
) -> QdqPlan:
    """The plan for `source` (the opset-normalised fp32 graph, weights in `base`), its
    activations calibrated by ModelOpt's `method` (max or entropy)."""
    # weights: initializers and Constant-node values (Paddle exports convolution weights as
    # Constant nodes; ModelOpt quantizes both as weights)
    weights = _Weights(source, base)
    edges = _gemm_edges(source, calibration_cfg)
    activations = sorted({t for _, _, t in edges if t not in weights.held})
    fixed = {o: 1.0 for n in source.graph.node if n.op_type == "Softmax" for o in n.output}
    measured = [t for t in activations if t not in fixed]
    gemms = list({id(n): n for n, _, _ in edges}.values())
    outputs = [n.output[0] for n in gemms if n.op_type in ops.MATMULS]
    found, shapes = RANGES[method](source, base, measured, batches, outputs)
    amax = {**found, **fixed}
    skipped = excluded(gemms, weights.held, shapes, mode, {i.name for i in source.graph.input})
    edges = [e for e in edges if e[0].name not in skipped]
    specs: dict[tuple[str, int], QSpec] = {}
    op_types: dict[str, str] = {}
    for node, idx, tensor in edges:
        if tensor in weights.held:
            specs[(node.name, idx)] = weights.spec(node, idx, mode)
        else:
            specs[(node.name, idx)] = _spec(np.float32(amax[tensor]), None, mode)
        op_types[node.name] = node.op_type
    return QdqPlan(specs, op_types, onnx_model.opset(source), "gemm_inputs")


class _Weights:
    """The GEMM inputs scaled as weights: initializers, Constant-node values and tied heads'
    Transposes (`held`: each as a TensorProto, a tied head's a header with its dims)."""

    def __init__(self, source: ModelProto, base: Path | None) -> None:
        from onnx import TensorProto

        self.base = base
        self.stored = {t.name for t in source.graph.initializer}
        self.held = constants(source)
        self.tied = tied_weights.transposed_from(source)
        for head, table in self.tied.items():
            kept = self.held[table]
            self.held[head] = TensorProto(name=head, data_type=kept.data_type, dims=kept.dims[::-1])

    def spec(self, node: Any, idx: int, mode: str) -> QSpec:
        """The Q/DQ of `node`'s weight input `idx`: max |w| per output channel, read now."""
        tensor = node.input[idx]
        # ONNX Runtime scales a Constant node's weight per tensor, an initializer per channel
        per_channel = tensor in self.stored or tensor in self.tied
        axis = _weight_axis(node, idx, self.held[tensor]) if per_channel else None
        if tensor in self.tied:
            w = streamed.weight(self.held[self.tied[tensor]], self.base).T
        else:
            w = streamed.weight(self.held[tensor], self.base)
        return _spec(_channel_max(w, axis), axis, mode)  # w let go: one weight at a time


def weigh_tied_heads(made: QdqPlan, source: ModelProto, base: Path | None, mode: str) -> None:
    """ModelOpt's plan with each tied head's weight scaled as plan() scales it: per channel
    from the table, where ModelOpt calibrated the Transpose's output as an activation."""
    if not tied_weights.transposed_from(source):
        return
    weights = _Weights(source, base)
    nodes = {n.name: n for n in source.graph.node}
    for name, idx in list(made.edges):
        node = nodes.get(name)
        if node is not None and node.op_type in ops.GEMMS and node.input[idx] in weights.tied:
            made.edges[(name, idx)] = weights.spec(node, idx, mode)


def _gemm_edges(
    source: ModelProto, calibration_cfg: CalibrationConfig
) -> list[tuple[Any, int, str]]:
    """(node, input index, tensor) of every GEMM's A/X and B/W input not excluded."""
    out = []
    for node in source.graph.node:
        if node.op_type not in ops.GEMMS or node.op_type in calibration_cfg.exclude_op_types:
            continue
        if any(re.match(p, node.name) for p in calibration_cfg.exclude_nodes):
            continue
        out += [(node, i, node.input[i]) for i in (0, 1) if i < len(node.input) and node.input[i]]
    return out


# Activation ranges, streamed, by ModelOpt's calibration method (quantize.METHODS)
RANGES = {"max": ranges.max_abs, "entropy": ranges.entropy}


def streamed_by(method: str) -> str:
    """What calibration.json says made the scales of ModelOpt's `method` when they were
    streamed."""
    return f"streamed {method} calibration (ModelOpt's scales, one weight at a time)"


def plan_files(
    model: ModelProto,
    base: Path,
    work: Path,
    mode: str,
    method: str,
    calibration_cfg: CalibrationConfig,
    data: CalibrationSet,
) -> tuple[dict[str, FileData], dict[str, int]]:
    """The streamed plan as a cache entry: the Q/DQ pairs on every GEMM edge of `model`,
    without its weights (plan.onnx), and its op histogram."""
    made = plan(model, base, mode, method, data.batches, calibration_cfg)
    if not made.edges:  # as ModelOpt's path says it: precision=auto leaves the type out
        raise NothingToQuantize(
            f"no GEMM of the model can be quantized to {mode} (excluded: nodes "
            f"{list(calibration_cfg.exclude_nodes)}, op types {list(calibration_cfg.exclude_op_types)},"
            f" and GEMMs too small for TensorRT's {mode} kernels)"
        )
    made.placement = "modelopt"  # every edge it holds
    graph = streamed.quantization_only(materialize(model, made))
    ops = onnx_model.op_histogram(graph)
    return cache.graph_files(graph, work, "plan.onnx"), ops


MIN_GEMM_DIM = 16  # ModelOpt's _MIN_MATMUL_DIM and _MIN_CHANNELS_FP8


def excluded(
    gemms: list[Any],
    inits: dict[str, Any],
    shapes: dict[str, tuple[int, ...]],
    mode: str,
    graph_inputs: set[str],
) -> set[str]:
    """The GEMMs ModelOpt 0.47 leaves unquantized for TensorRT's sake (graph_utils.py:
    find_nodes_from_matmul_to_exclude, find_nodes_from_convs_to_exclude), by the shapes
    of the first calibration batch and the weights' dims."""
    out = set()
    for node in gemms:
        if node.op_type in ops.MATMULS:
            skip = _small_matmul(node, inits, shapes)
        elif node.op_type == "Conv":
            skip = _small_conv(node, inits, mode, bool(graph_inputs & set(node.input)))
        else:
            skip = False
        if skip:
            out.add(node.name)
    return out


def _small_matmul(node: Any, inits: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> bool:
    out = shapes.get(node.output[0])
    if out is None:
        return False
    if not any(x in inits for x in node.input[:2]):
        if len(out) < 2 or out[-1] == 1 or out[-2] == 1:
            return True  # a GEMV of two activations
    elif len(out) < 3 and 1 in out:
        return True  # a GEMV
    b = inits[node.input[1]].dims if node.input[1] in inits else shapes.get(node.input[1], ())
    trans_b = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
    k = b[-1 if trans_b else -2] if len(b) >= 2 else None
    n = out[-1] if len(out) >= 2 else 0
    return 0 < n < MIN_GEMM_DIM or (k is not None and 0 < k < MIN_GEMM_DIM)


def _small_conv(node: Any, inits: dict[str, Any], mode: str, reads_input: bool) -> bool:
    w = inits.get(node.input[1])
    if w is None:
        return True  # ModelOpt quantizes convolutions of constant weights only
    oc, ic = int(w.dims[0]), int(w.dims[1])
    attrs = {a.name: a for a in node.attribute}
    group = attrs["group"].i if "group" in attrs else 1
    kernel = list(attrs["kernel_shape"].ints) if "kernel_shape" in attrs else [1, 1]
    if oc < MIN_GEMM_DIM or ic < MIN_GEMM_DIM:
        if mode == "int8" and _int8_small_conv_ok(oc, ic, group, kernel, reads_input):
            return False
        return True
    if mode == "fp8":
        return int(np.prod(w.dims[2:])) > 32 or oc <= MIN_GEMM_DIM or ic <= MIN_GEMM_DIM
    return False


def _int8_small_conv_ok(oc: int, ic: int, group: int, kernel: list[int], reads_input: bool) -> bool:
    """ModelOpt's exceptions for int8 convolutions of few channels."""
    if group > 1:
        return oc % 8 == 0 and all(k >= 3 for k in kernel)
    wide = reads_input or oc >= MIN_GEMM_DIM or ic >= MIN_GEMM_DIM
    return (oc % 8 == 0 or ic % 8 == 0) and wide and len(set(kernel)) == 1


def _weight_axis(node: Any, idx: int, weight: Any) -> int | None:
    """The per-channel axis of a constant GEMM input, or None for one scale (a constant A,
    or a weight of another rank than ONNX Runtime quantizes per channel)."""
    if idx != 1:
        return None
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        axis = 0 if trans_b else 1
    else:
        axis = WEIGHT_AXIS[node.op_type]
    if node.op_type in ops.MATMULS and len(weight.dims) != 2:
        return None
    return axis


def _channel_max(w: np.ndarray, axis: int | None) -> np.ndarray:
    a = np.abs(w.astype(np.float32, copy=False))
    if axis is None:
        return np.asarray(a.max() if a.size else 0, dtype=np.float32)
    return np.asarray(a.max(axis=tuple(i for i in range(a.ndim) if i != axis)), dtype=np.float32)


def _spec(amax: Any, axis: int | None, mode: str) -> QSpec:
    from onnx import TensorProto, helper, numpy_helper

    scale = np.asarray(amax, dtype=np.float32) / INT8_MAX
    # ONNX Runtime gives a range of zero the scale 1 (nothing to quantize there)
    scale = np.where(scale < np.finfo(np.float32).tiny, np.float32(1.0), scale).astype(np.float32)
    if mode == "fp8":
        scale = (scale * FP8_MAX) / INT8_MAX  # ModelOpt's int8_to_fp8
        zero = helper.make_tensor("", TensorProto.FLOAT8E4M3FN, scale.shape, [0] * scale.size)
    else:
        zero = numpy_helper.from_array(np.zeros(scale.shape, dtype=np.int8))
    attrs = (("axis", axis),) if axis is not None else ()
    return QSpec(numpy_helper.from_array(scale.astype(np.float32)), zero, attrs, attrs)
