"""int4 weight-only (precision=int4_awq, int4_rtn): ModelOpt's ONNX int4 quantization on the
CPU (AWQ with clip search, or round-to-nearest), behind the calibration cache.

Each MatMul/Gemm with a constant weight reads it through a blocked DequantizeLinear of an
INT4 initializer (opset 21, precision.block_size along the reduction axis); activations stay
in the source's precision. TensorRT and TensorRT-RTX build it on Ampere and newer (compute
capability 8.0 and up). Learned the hard way, and handled here:
- ModelOpt's `rtn` writes a graph ONNX Runtime refuses (2-D scales without block_size):
  round-to-nearest is its `rtn_dq`.
- Its AWQ misreads Gemm(transB=1) weights (scales along the wrong axis): such weights are
  transposed first (transB=0), which computes the same product.
- Its top-level call quantizes every GEMM (an lm_head too): calibration.exclude_nodes
  (anchored regexes, as ModelOpt matches them) keeps some out; the fallback search keeps
  the most sensitive ones in the source's precision."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired

from pipeline.core import hashing
from pipeline.core.choices import Int4Method
from pipeline.core.errors import NothingToQuantize, PipelineError, first_line
from pipeline.graph import onnx_model, tied_weights
from pipeline.inputs import calibration_data
from pipeline.inputs.calibration_data import CalibrationSet
from pipeline.precision.calibration import cache, reader
from pipeline.precision.calibration.cache import LibraryVersions, library_versions
from pipeline.precision.calibration.result import QuantizeResult
from pipeline.precision.common import streamed
from pipeline.precision.common.ops import at_opset
from pipeline.precision.int4 import awq
from pipeline.precision.int4.graphs import Int4Graphs
from pipeline.store import FileData

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.core.config import CalibrationConfig, ModelConfig, PrecisionConfig

KEY_VERSION = 1
METHODS = ("awq_clip", "rtn_dq")  # what precision.int4_method names: ModelOpt's own names
NEEDS_DATA = ("awq_clip",)
OPSET = 21  # blocked DequantizeLinear


class Int4Key(LibraryVersions):
    """The calibration cache's key of the int4 weights (key_inputs)."""

    key_version: int
    transform: str  # "int4"
    onnx_sha256: str
    data_sha256: str | None  # None: round-to-nearest reads no data
    method: str | None  # precision.int4_method
    block_size: int
    embeddings: bool  # precision.int4_embeddings
    exclude_nodes: list[str]
    calibrated_by: NotRequired[str]  # STREAMED's line, where the weights are streamed


def key_inputs(
    src: Path,
    data: CalibrationSet | None,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
) -> Int4Key:
    """What ModelOpt's int4 weights depend on."""
    return {
        "key_version": KEY_VERSION,
        "transform": "int4",
        "onnx_sha256": onnx_model.sha256(src),
        "data_sha256": data.info["sha256"] if data is not None else None,
        "method": precision_cfg.int4_method,
        "block_size": int(precision_cfg.block_size),
        "embeddings": bool(precision_cfg.int4_embeddings),
        "exclude_nodes": list(calibration_cfg.exclude_nodes),
        **library_versions(),
    }


def quantize_int4(
    src: Path,
    dest: Path,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
) -> QuantizeResult:
    """Write dest (the plain int4 graph); return the summary, the calibration data (None for
    round-to-nearest, which reads none) and every graph the fallback search may write."""
    method = precision_cfg.int4_method
    data = calibration_data.load(calibration_cfg, model_cfg, src) if method in NEEDS_DATA else None
    source = onnx_model.load(src, check=False, weights=False)
    why = streamed.why_not(precision_cfg, calibration_cfg, source)
    block = int(precision_cfg.block_size)
    stream = (
        streamed.chosen(calibration_cfg, why, source)
        or _every_shape(data, why, calibration_cfg)
        or _partial_blocks(source, block, why, calibration_cfg)
    )
    if not stream:  # ModelOpt takes the weights in memory, and the batches stacked
        streamed.refuse_huge_tensors(source, "int4")
        source = onnx_model.load(src, check=False)
        data = calibration_data.of_one_shape(data) if data is not None else None
    # transposed Gemm weights are read (and held) here, streamed or not
    untransposed = untranspose_gemm_weights(source, src.parent)
    inputs = key_inputs(src, data, precision_cfg, calibration_cfg)
    if stream:  # another computation of the same weights: its own entries (old keys unchanged)
        inputs["calibrated_by"] = STREAMED[method]
        source = at_opset(source, OPSET, "int4")
    int4, cache_record = _int4_graph(
        source, src.parent, inputs, stream, precision_cfg, calibration_cfg, data
    )
    # ModelOpt gives each reader of a shared constant its own copy (duplicate_shared_constants):
    # a tied head's `table_1` beside the Gather's `table_2`. Left so, the head's copy is no
    # table to narrow and stays fp32 in the engine beside the int4 table (a 5 M-parameter
    # decoder's int4 engine: 15.0 MiB, larger than its fp16 one; 7.2 stored once).
    ties = [] if stream else tied_weights.store_once(int4, None)
    graphs = Int4Graphs.of(source, int4, int(precision_cfg.block_size), src.parent)
    plain = graphs.graph()
    cache.save_beside(plain, dest, src.parent)
    ops = onnx_model.op_histogram(plain)
    summary = {
        "quantize_mode": "int4",
        "method": method,
        "block_size": int(precision_cfg.block_size),
        "embeddings": bool(precision_cfg.int4_embeddings),
        "data": data.info if data is not None else NO_DATA,
        "exclude_nodes": list(calibration_cfg.exclude_nodes),
        "gemm_weights_untransposed": untransposed,
        "calibrated_by": STREAMED[method] if stream else "modelopt",
        **awq.sampling(plain),
        "dequantize_linear_nodes": ops.get("DequantizeLinear", 0),
        "modelopt_version": inputs["nvidia-modelopt"],
        "onnxruntime_version": inputs["onnxruntime"],
        "result_sha256": onnx_model.sha256(dest),
        "cache": cache_record,
    }
    if ties:
        summary["stored_once"] = [t.line() for t in ties]
    return QuantizeResult(summary, data, graphs)


def _every_shape(
    data: CalibrationSet | None, why: str | None, calibration_cfg: CalibrationConfig
) -> bool:
    """Whether AWQ streams so that every calibration batch counts: ModelOpt's stacks the
    batches into one array per input, so of prompts of many lengths it would read only the
    largest group of one length (a tutorial's decoder: 18 of 288); the streamed clip search
    runs each batch as it is. Not where streaming is switched off or cannot run."""
    if data is None or why is not None or calibration_cfg.streaming == "never":
        return False
    shapes = set(calibration_data.batch_shapes(data))
    if len(shapes) < 2:
        return False
    data.info["every_shape"] = (
        f"{len(data.batches)} batches of {len(shapes)} shapes, every one read: AWQ through the "
        f"streamed clip search (ModelOpt's stacks the batches, so only one shape would count)"
    )
    return True


def _partial_blocks(
    source: ModelProto, block: int, why: str | None, calibration_cfg: CalibrationConfig
) -> bool:
    """Whether to stream because a GEMM weight's reduction axis is no multiple of the block:
    ModelOpt pads the last block, which TensorRT refuses; the streamed weights take a block
    that divides it (rtn.fitting_block)."""
    if why is not None or calibration_cfg.streaming == "never":
        return False
    from pipeline.precision.int4.rtn import fitting_block

    inits = {i.name: i for i in source.graph.initializer}
    for node in source.graph.node:
        w = inits.get(node.input[1]) if node.op_type in ("MatMul", "Gemm") else None
        if w is None or len(w.dims) != 2:
            continue
        rows = w.dims[1] if any(a.name == "transB" and a.i for a in node.attribute) else w.dims[0]
        if fitting_block(rows, block) != block:
            return True
    return False


def _int4_graph(
    source: ModelProto,
    base: Path,
    inputs: Int4Key,
    stream: bool,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    data: CalibrationSet | None,
) -> tuple[Any, dict[str, Any]]:
    """The int4 graph (ModelOpt's, or the streamed one with the source's weights by
    reference), from the calibration cache or made; and the cache's record."""
    name = "plan.onnx" if stream else "model.onnx"
    with tempfile.TemporaryDirectory(prefix="int4.") as tmp:

        def make() -> tuple[dict[str, FileData], dict[str, Any], str]:
            if stream:
                files = _streamed_files(
                    source, base, Path(tmp), precision_cfg, calibration_cfg, data
                )
            else:
                files = run_modelopt(source, Path(tmp), precision_cfg, calibration_cfg, data)
            return files, {"kind": "int4", **inputs}, "miss"

        got, cache_record = cache.cached(
            calibration_cfg, hashing.sha256_json(inputs), make, "int4 result", required=(name,)
        )
        # in memory: the int4 tensors (streamed: the other weights stay in the source's
        # files), or ModelOpt's whole graph (as its source is)
        int4 = cache.read_whole_graph(got, name)
    return (streamed.with_source_weights(int4, source) if stream else int4), cache_record


# What calibration.json says made the weights when they were streamed (int4/rtn.py,
# int4/awq.py), by precision.int4_method.
STREAMED: dict[Int4Method | None, str] = {
    Int4Method.rtn_dq: "streamed round-to-nearest (ModelOpt's rtn_dq weights, one weight at a time)",
    Int4Method.awq_clip: "streamed AWQ clip search (ModelOpt's search, one weight at a time)",
}


def _streamed_files(
    source: ModelProto,
    base: Path,
    work: Path,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    data: CalibrationSet | None,
) -> dict[str, FileData]:
    """The streamed int4 graph as a cache entry: its nodes, int4 weights and scales,
    without the source's weights (plan.onnx)."""
    from pipeline.precision.int4 import rtn

    block = int(precision_cfg.block_size)
    exclude = list(calibration_cfg.exclude_nodes)
    alphas, sampled = (
        awq.search(source, base, data, block, exclude) if data is not None else (None, {})
    )
    embeddings = bool(precision_cfg.int4_embeddings)
    made = rtn.graph(source, base, block, exclude, embeddings, alphas)
    awq.record_sampling(made, sampled)
    if not any(i.data_type in (21, 22) for i in made.graph.initializer):
        raise NothingToQuantize(NOTHING_QUANTIZED)
    return cache.graph_files(streamed.quantization_only(made), work, "plan.onnx")


NOTHING_QUANTIZED = (
    "no weight was quantized to int4: the graph has no MatMul or Gemm with a constant "
    "weight (or calibration.exclude_nodes names them all)"
)


NO_DATA = {
    "source": "none",
    "random": False,
    "num_samples": 0,
    "note": "round-to-nearest reads no calibration data",
}


def _gather_kwargs(precision_cfg: PrecisionConfig) -> dict[str, int]:
    """precision.int4_embeddings: embedding tables (a Gather of a constant) in int4 too, in
    blocks along the hidden axis; TensorRT reads them as a Gather over a DequantizeLinear."""
    if not precision_cfg.int4_embeddings:
        return {}
    return {"gather_quantize_axis": 1, "gather_block_size": int(precision_cfg.block_size)}


def untranspose_gemm_weights(model: ModelProto, base: Path | None = None) -> int:
    """Gemm(transB=1) with a constant weight read by that Gemm alone: the weight stored
    transposed and transB=0 (the same product). ModelOpt's AWQ blocks a transposed weight
    along the wrong axis, which ONNX Runtime and TensorRT refuse."""
    import numpy as np
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    readers: dict[str, int] = {}
    for n in model.graph.node:
        for x in n.input:
            readers[x] = readers.get(x, 0) + 1
    done = 0
    for node in model.graph.node:
        trans_b = next((a for a in node.attribute if a.name == "transB"), None)
        if node.op_type != "Gemm" or trans_b is None or trans_b.i != 1:
            continue
        w = inits.get(node.input[1])
        if w is None or readers.get(w.name) != 1:
            continue
        values = streamed.weight(w, base)  # from its external-data file, if it has one
        w.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(values.T), w.name))
        node.attribute.remove(trans_b)
        node.attribute.append(helper.make_attribute("transB", 0))
        done += 1
    return done


def run_modelopt(
    model: ModelProto,
    work: Path,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    data: CalibrationSet | None,
) -> dict[str, FileData]:
    """The int4 graph ModelOpt makes of `model` (weights in memory), as a cache entry's files."""
    from pipeline.core import console
    from pipeline.precision.common.modelopt_log import quiet_modelopt

    try:
        from modelopt.onnx.quantization import quantize as mo_quantize
    except ImportError as e:
        raise PipelineError(f"int4 needs nvidia-modelopt with its ONNX dependencies: {e}") from None
    work = work.resolve()  # ModelOpt runs in `work` (quiet_modelopt): every path absolute
    (work / "in").mkdir()
    src = work / "in" / "model.onnx"
    with onnx_model.unnamed_dims_named(model):
        external = onnx_model.save_copy(model, src)[1:]
    out = work / "model.int4.onnx"
    batches = data.batches if data is not None else []
    with console.bar(total=len(batches), desc="int4 weights", unit="batch") as bar:
        try:
            with quiet_modelopt(work):
                mo_quantize(
                    onnx_path=str(src),
                    quantize_mode="int4",
                    calibration_method=precision_cfg.int4_method,
                    calibration_data_reader=reader.reader(batches, bar) if batches else None,
                    calibration_eps=["cpu"],
                    block_size=int(precision_cfg.block_size),
                    nodes_to_exclude=list(calibration_cfg.exclude_nodes),
                    use_external_data_format=bool(external),
                    **_gather_kwargs(precision_cfg),
                    output_path=str(out),
                    log_level="WARNING",
                )
        except Exception as e:
            raise PipelineError(f"ModelOpt int4 quantization failed: {first_line(e)}") from None
    if not out.is_file():
        raise PipelineError("ModelOpt int4 quantization wrote no model")
    model_out = onnx_model.load(out, check=False, weights=False)
    if not any(i.data_type in (21, 22) for i in model_out.graph.initializer):
        raise NothingToQuantize(f"ModelOpt: {NOTHING_QUANTIZED}")
    return cache.entry_files(out)
