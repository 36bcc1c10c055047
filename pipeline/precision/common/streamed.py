"""Transforms in bounded memory (calibration.streaming): the fp32 graph is read without
its weights, each weight is read from its external-data file when its scales are made and
let go, and activation ranges come from one ONNX Runtime session that reads the weights
from the same files (calibration/ranges.py). Nothing holds a second copy of the weights.

ModelOpt's ONNX quantizers load the whole model, round-trip it through onnx-graphsurgeon
and copy it again (7-8x the model's bytes on a 2.46 GB encoder), and its per-node
calibration does not change that (docs/models-past-2gb.md). What the tool needs of them is
small: per-tensor activation scales (max, or ONNX Runtime's entropy histograms) and
per-channel weight scales for int8/fp8 (the Q/DQ graphs are written from the fp32 graph
anyway, qdq/plan.py), and blocked int4 weights. Both are made here with ModelOpt's numbers
(the tests compare them), so a model takes the same graph whichever way it was calibrated.

AutoCast (fp16/bf16) runs ModelOpt's own classifier and converter on the graph without
its weights (autocast/streamed.py), and AWQ's clip search (int4_awq) ModelOpt's own search
one weight at a time on the tokens it samples (int4/awq.py). What needs the whole model
stays with ModelOpt: precision.qdq_placement=modelopt (its own choice of non-GEMM edges)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.core.config import CalibrationConfig, PrecisionConfig


def external_data(model: ModelProto) -> bool:
    """Whether the graph keeps any weight in external-data files."""
    from onnx.external_data_helper import uses_external_data

    return any(uses_external_data(t) for t in model.graph.initializer)


def why_not(
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    source: ModelProto | None = None,
) -> str | None:
    """Why this precision's transform of `source` cannot be streamed, or None."""
    transform = precision_cfg.transform
    if transform == "qdq" and precision_cfg.qdq_placement != "gemm_inputs":
        return f"precision.qdq_placement={precision_cfg.qdq_placement} (ModelOpt's own placement)"
    computed = computed_weights(source) if source is not None else []
    if computed:
        node = computed[0]
        return (
            f"GEMM weights the graph computes from constants ({len(computed)} GEMMs, the first "
            f"{node.op_type} '{node.name}'): streaming reads stored weights, ModelOpt folds "
            f"these first"
        )
    return None


def computed_weights(model: ModelProto) -> list[Any]:
    """The GEMMs whose weight (input 1) is no initializer but the output of nodes that read
    constants only (a ConstantOfShape, a Constant, a Cast or Reshape of one): ONNX's test
    models and some exporters make weights this way. Streaming reads each weight from the
    file it is stored in, so it has nothing to read for these. A tied head's Transpose of
    its table (graph/tied_weights.py) is not one: that weight stays in the table's type."""
    from pipeline.graph import tied_weights
    from pipeline.precision.common.ops import GEMMS

    stored = {i.name for i in model.graph.initializer}
    constant = set(stored)
    for node in model.graph.node:  # in order: a graph's nodes come after their inputs'
        if tied_weights.is_tie(node):
            continue
        if all(x in constant for x in node.input if x) and not any(onnx_model.subgraphs(node)):
            constant.update(node.output)
    return [
        n
        for n in model.graph.node
        if n.op_type in GEMMS and len(n.input) > 1 and n.input[1] in constant - stored
    ]


def chosen(calibration_cfg: CalibrationConfig, why: str | None, source: ModelProto) -> bool:
    """calibration.streaming for a transform of `source` that cannot stream for the reason
    `why` (None: it can). auto streams a model whose weights are in external-data files
    where it can, and warns where it cannot; always streams or says in one line why not."""
    from pipeline.core import console

    mode = calibration_cfg.streaming
    if mode == "never":
        return False
    if mode == "always" and why:
        raise PipelineError(
            f"calibration.streaming=always cannot stream {why}; use calibration.streaming=auto "
            "or never"
        )
    if mode == "always":
        return True
    if not external_data(source):
        return False
    if why:
        console.warn(
            f"the model keeps its weights in external data, but {why} is not streamed: ModelOpt "
            "loads and copies the whole model (about 8x its bytes of memory; "
            "docs/models-past-2gb.md)"
        )
    return why is None


# bytes: ModelOpt's onnx-graphsurgeon round trip holds a tensor in one protobuf message
PROTOBUF_LIMIT = 2**31


def refuse_huge_tensors(source: ModelProto, what: str) -> None:
    """One line, before any work, for a weight ModelOpt's whole-model path cannot hold
    (a protobuf message of 2 GB or more); streaming reads it as a file slice."""
    from pipeline.graph.onnx_model import tensor_bytes

    for t in source.graph.initializer:
        size = tensor_bytes(t)
        if size >= PROTOBUF_LIMIT:
            raise PipelineError(
                f"weight {t.name!r} is {size / 1e9:.2f} GB: {what} through ModelOpt cannot hold "
                "a tensor of 2 GB or more (one protobuf message); calibration.streaming=always "
                "reads it from its file"
            )


def weight(tensor: Any, base: Path | None) -> np.ndarray:
    """One initializer's values, read from its external-data file when it has one."""
    from pipeline.graph.external_data import read_apart

    return read_apart(tensor, base)


def quantization_only(model: ModelProto) -> Any:
    """The graph's nodes and the tensors its Q/DQ nodes add (scales, zero points, int4
    weights), without the source's weights: what a cache entry stores of a streamed
    transform. The source gives the weights back (with_source_weights)."""
    import onnx

    added = set()
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear":
            added.update(n.input)
        elif n.op_type == "QuantizeLinear":
            added.update(n.input[1:])
    m = onnx.ModelProto()
    m.CopyFrom(model)
    kept = [t for t in m.graph.initializer if t.name in added]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    return m


def with_source_weights(model: ModelProto, source: ModelProto) -> Any:
    """`model` with every initializer of `source` it lacks, by reference (external data)."""
    have = {t.name for t in model.graph.initializer}
    model.graph.initializer.extend(t for t in source.graph.initializer if t.name not in have)
    return model
