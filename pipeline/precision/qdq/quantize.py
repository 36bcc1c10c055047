"""ModelOpt post-training quantization (explicit Q/DQ, int8
or fp8), calibrated with ONNX Runtime on the CPU, behind a content-addressed cache.

The cache key is the sha256 of the input ONNX, of the calibration data and of every
setting that changes the scales (quantize mode, method, exclusions, ModelOpt and ONNX
Runtime versions); a hit copies the stored Q/DQ graph and imports no ModelOpt."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from pipeline.core import console, fileio, hashing
from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model, tied_weights
from pipeline.inputs import calibration_data
from pipeline.inputs.calibration_data import CalibrationSet
from pipeline.machine.fingerprint import package_version
from pipeline.precision.calibration import cache
from pipeline.precision.calibration.result import QuantizeResult
from pipeline.precision.common import ops, streamed
from pipeline.precision.qdq import plan, smoothed_source, smoothing
from pipeline.precision.qdq.graphs import QdqGraphs
from pipeline.precision.qdq.modelopt_run import HIGH_PRECISION, HistogramFailed, run_modelopt
from pipeline.precision.qdq.smoothing import SmoothGroup, SmoothingKey, SmoothingRecord
from pipeline.precision.qdq.streamed import plan_files, streamed_by, weigh_tied_heads
from pipeline.store import FileData, Outcome

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.core.config import CalibrationConfig, ModelConfig, PrecisionConfig

KEY_VERSION = 2
# ModelOpt 0.47 hands ONNX Runtime either Entropy or MinMax; with symmetric activations
# MinMax is max calibration, so minmax is a name for max, not another method.
METHODS = {"entropy": "entropy", "max": "max", "minmax": "max"}


def _version(dist: str) -> str:
    return package_version(dist) or "not installed"


def modelopt_method(method: str, quantize_mode: str) -> str:
    if method not in METHODS:
        raise PipelineError(
            f"calibration.method={method} is not supported for {quantize_mode}: ModelOpt "
            f"{_version('nvidia-modelopt')} ONNX PTQ calibrates with entropy or max (minmax = max)"
        )
    return METHODS[method]


class QdqKey(TypedDict):
    """The calibration cache's key of ModelOpt's scales (key_inputs)."""

    key_version: int
    onnx_sha256: str
    data_sha256: str
    quantize_mode: str  # "int8", "fp8"
    method: str  # ModelOpt's: "entropy", "max" (max where entropy could not histogram)
    exclude_nodes: list[str]
    exclude_op_types: list[str]  # sorted: their order does not change the key
    high_precision_dtype: str
    modelopt: str  # its version, or "not installed"
    onnxruntime: str  # its version, or "not installed"
    smoothing: SmoothingKey | None  # None: precision.smoothing=none
    calibrated_by: NotRequired[str]  # where the scales are calibrated streamed
    tied_heads: NotRequired[str]  # where a streamed plan scales tied heads as weights
    op_types_to_quantize: NotRequired[list[str]]  # where ModelOpt calibrates the GEMMs alone


def key_inputs(
    src: Path,
    data: CalibrationSet,
    quantize_mode: str,
    calibration_cfg: CalibrationConfig,
    smooth: SmoothingRecord | None,
) -> QdqKey:
    """What ModelOpt's scales depend on. The placement is not here: it is applied to
    ModelOpt's result afterwards. Only which op types ModelOpt calibrates follows it
    (_streams adds the GEMMs' under gemm_inputs), and a calibration of every op type serves
    every placement (_whole_graph_entry)."""
    return {
        "key_version": KEY_VERSION,
        "onnx_sha256": onnx_model.sha256(src),
        "data_sha256": data.info["sha256"],
        "quantize_mode": quantize_mode,
        "method": modelopt_method(calibration_cfg.method, quantize_mode),
        "exclude_nodes": list(calibration_cfg.exclude_nodes),
        "exclude_op_types": sorted(calibration_cfg.exclude_op_types),
        "high_precision_dtype": HIGH_PRECISION,
        "modelopt": _version("nvidia-modelopt"),
        "onnxruntime": _version("onnxruntime"),
        "smoothing": {
            "mode": smooth["mode"],
            "alpha": smooth["alpha"],
            "groups_sha256": smooth["groups_sha256"],
        }
        if smooth
        else None,
    }


def cache_key(inputs: QdqKey) -> str:
    return hashing.sha256_json(inputs)


def check_exclusions(src: Path, calibration_cfg: CalibrationConfig) -> None:
    if not calibration_cfg.exclude_op_types and not calibration_cfg.exclude_nodes:
        return  # nothing to check: spare a large model's parse
    nodes = onnx_model.load(src, check=False, weights=False).graph.node
    op_types = {n.op_type for n in nodes}
    for op in calibration_cfg.exclude_op_types:
        if op not in op_types:
            raise PipelineError(
                f"calibration.exclude_op_types: the model has no {op} node "
                f"(its op types: {', '.join(sorted(op_types))})"
            )
    for pattern in calibration_cfg.exclude_nodes:
        try:
            hit = any(re.match(pattern, n.name) for n in nodes)
        except re.error as e:
            raise PipelineError(
                f"calibration.exclude_nodes: {pattern!r} is not a regular expression ({e})"
            ) from None
        if not hit:
            raise PipelineError(
                f"calibration.exclude_nodes: {pattern!r} matches no node name of the model"
            )


def quantize(
    src: Path,
    dest: Path,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
) -> QuantizeResult:
    """Write dest (the plain Q/DQ graph); return the calibration summary, the data used
    and every graph the fallback search may write from the same calibration."""

    mode = precision_cfg.quantize_mode
    assert mode is not None, "validate() requires precision.quantize_mode for transform=qdq"
    method = modelopt_method(calibration_cfg.method, mode)
    check_exclusions(src, calibration_cfg)
    data = calibration_data.load(calibration_cfg, model_cfg, src)
    # Weights kept in external data stay on disk: ModelOpt, ONNX Runtime and SmoothQuant
    # read them one file (or tensor) at a time, and the Q/DQ graphs name them.
    on_disk = onnx_model.load(src, check=False, weights=False)
    source = qdq_source(on_disk, mode)
    groups, smooth = smoothing_groups(source, src.parent, precision_cfg, data)
    prepared = smoothed_source.prepare(source, src.parent, groups)
    # What ModelOpt calibrates, and what its plan maps onto.
    smoothed = smoothing.apply(prepared.source, groups, made=prepared.made) if groups else source
    inputs = key_inputs(src, data, mode, calibration_cfg, smooth)
    stream = _streams(source, on_disk, inputs, precision_cfg, calibration_cfg)
    modelopt_graph, cache_record, fallback = _calibrated(
        smoothed, prepared.base, inputs, stream, calibration_cfg, data
    )
    method = inputs["method"]
    qdq_plan = plan.extract(modelopt_graph, smoothed, precision_cfg.qdq_placement)
    if not stream:  # the streamed plan has scaled them so already
        weigh_tied_heads(qdq_plan, smoothed, prepared.base, mode)
    del smoothed, modelopt_graph
    graphs = QdqGraphs(
        prepared.source, qdq_plan, groups, prepared.base, prepared.made, prepared.scratch
    )
    plain = graphs.graph()
    cache.save_beside(plain, dest, prepared.base)
    histogram = onnx_model.op_histogram(plain)
    summary = {
        "quantize_mode": mode,
        "method": calibration_cfg.method,
        "modelopt_method": method,
        "high_precision_dtype": HIGH_PRECISION,
        "qdq_placement": precision_cfg.qdq_placement,
        "smoothing": smooth,
        "data": data.info,
        "exclude_nodes": list(calibration_cfg.exclude_nodes),
        "exclude_op_types": list(calibration_cfg.exclude_op_types),
        "quantize_linear_nodes": histogram.get("QuantizeLinear", 0),
        "dequantize_linear_nodes": histogram.get("DequantizeLinear", 0),
        "calibrated_by": streamed_by(method) if stream else "modelopt",
        "modelopt_version": inputs["modelopt"],
        "onnxruntime_version": inputs["onnxruntime"],
        "result_sha256": onnx_model.sha256(dest),
        "cache": cache_record,
    }
    if fallback:
        summary["method_fallback"] = fallback
    return QuantizeResult(summary, data, graphs)


def _streams(
    source: ModelProto,
    on_disk: ModelProto,
    inputs: QdqKey,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
) -> bool:
    """Whether the scales are calibrated streamed (calibration.streaming); `inputs` (the
    cache key's) then say so, and a model ModelOpt will load is checked for tensors it cannot
    hold, and under qdq_placement=gemm_inputs `inputs` name the GEMM op types ModelOpt is
    asked for (_cached_scales). Whether the file keeps its weights apart decides (`on_disk`):
    a smoothed 135M decoder went through ModelOpt at 15x its bytes."""
    why = streamed.why_not(precision_cfg, calibration_cfg, source)
    stream = streamed.chosen(calibration_cfg, why, on_disk)
    if stream:  # another computation of the same scales: its own entries (old keys unchanged)
        inputs["calibrated_by"] = streamed_by(inputs["method"])
        if tied_weights.transposed_from(source):  # plans stored before scaled them otherwise
            inputs["tied_heads"] = "per-channel weights"
    else:
        streamed.refuse_huge_tensors(source, f"{inputs['quantize_mode']} calibration")
        if precision_cfg.qdq_placement == "gemm_inputs":
            inputs["op_types_to_quantize"] = _gemm_op_types(inputs["quantize_mode"])
    return stream


def _calibrated(
    smoothed: ModelProto,
    base: Path,
    inputs: QdqKey,
    stream: bool,
    calibration_cfg: CalibrationConfig,
    data: CalibrationSet,
) -> tuple[Any, dict[str, Any], str | None]:
    """_cached_scales(), by max where entropy calibration cannot histogram the graph
    (HistogramFailed): inputs["method"] then says max, and the note says why."""
    try:
        return (*_cached_scales(smoothed, base, inputs, stream, calibration_cfg, data), None)
    except HistogramFailed as e:
        inputs["method"] = modelopt_method("max", inputs["quantize_mode"])
        console.warn(f"{e}; calibrated by max instead (calibration.method=max says so up front)")
        got = _cached_scales(smoothed, base, inputs, stream, calibration_cfg, data)
        return (*got, f"{e}; calibrated by max")


def _cached_scales(
    smoothed: ModelProto,
    base: Path,
    inputs: QdqKey,
    stream: bool,
    calibration_cfg: CalibrationConfig,
    data: CalibrationSet,
) -> tuple[Any, dict[str, Any]]:
    """The graph whose Q/DQ nodes hold the scales (ModelOpt's, or the streamed plan's), from
    the calibration cache or made; and the cache's record.

    ModelOpt calibrates every op type it can quantize, each tensor on its own histogram, and
    ONNX Runtime's calibration session outputs all of those tensors at once. Where only the
    GEMMs' edges are kept (qdq_placement=gemm_inputs), ModelOpt is asked for the GEMMs alone
    (`op_types_to_quantize` in `inputs`): the same scales, bit for bit on the PP-OCRv4
    recognizer's 88 edges, in 8.3 s and 1.27 GB against 15.3 s and 2.64 GB. An entry made
    for every op type (by any placement, or before this) serves those runs too."""
    mode, method = inputs["quantize_mode"], inputs["method"]
    name = "plan.onnx" if stream else "model.onnx"
    whole = _whole_graph_entry(inputs, calibration_cfg)
    if whole is not None:
        return whole
    with tempfile.TemporaryDirectory(prefix="qdq.") as tmp:

        def make() -> tuple[dict[str, FileData], dict[str, Any], str]:
            if stream:
                files, ops = plan_files(
                    smoothed, base, Path(tmp), mode, method, calibration_cfg, data
                )
            else:
                files, ops = run_modelopt(
                    smoothed,
                    base,
                    Path(tmp),
                    mode,
                    method,
                    calibration_cfg,
                    data,
                    inputs.get("op_types_to_quantize"),
                )
            labels = dict(inputs)  # a plain dict to the store
            # ops.json spares a hit parsing the graph again (large models: a second or more)
            return {**files, "ops.json": fileio.to_json(ops).encode()}, labels, "miss"

        got, cache_record = cache.cached(
            calibration_cfg, cache_key(inputs), make, "calibration result", required=(name,)
        )
        return cache.read_graph(got, name), cache_record


def _gemm_op_types(mode: str) -> list[str]:
    """The GEMM op types ModelOpt quantizes in `mode` (its fp8 mode refuses ConvTranspose)."""
    return sorted(t for t in ops.GEMMS if not (mode == "fp8" and t == "ConvTranspose"))


def _whole_graph_entry(
    inputs: QdqKey, calibration_cfg: CalibrationConfig
) -> tuple[Any, dict[str, Any]] | None:
    """ModelOpt's graph of every op type, where the cache holds one for a run that asks for
    the GEMMs alone (`inputs` names their op types), and its record; else None."""
    if "op_types_to_quantize" not in inputs:
        return None
    whole = cast("QdqKey", {k: v for k, v in inputs.items() if k != "op_types_to_quantize"})
    key = cache_key(whole)
    entry = cache.store(calibration_cfg).get(key)
    if entry is None:
        return None
    return cache.read_graph(Outcome("hit", entry)), {"key": key, "hit": True}


def qdq_source(model: ModelProto, mode: str) -> Any:
    """The fp32 graph at an opset its Q/DQ nodes fit in: per-channel int8 needs 13, fp8
    needs 19 (the fp32 reference stays the original)."""
    return ops.at_opset(model, 19 if mode == "fp8" else 13, mode)


def smoothing_groups(
    source: ModelProto, base_dir: Path, precision_cfg: PrecisionConfig, data: CalibrationSet
) -> tuple[list[SmoothGroup], SmoothingRecord | None]:
    """precision.smoothing: the SmoothQuant groups and what calibration.json says of them."""
    mode, alpha = precision_cfg.smoothing, float(precision_cfg.smoothing_alpha)
    if mode == "none":
        return [], None
    groups = smoothing.compute(
        source,
        alpha,
        lambda tensors: smoothing.activation_max(source, base_dir, tensors, data.batches),
        base_dir,
    )
    if not groups and mode == "smoothquant":
        raise PipelineError(
            "precision.smoothing=smoothquant: no activation of the graph is read by a MatMul with "
            "constant 2-D weights, so there is nothing to smooth and nothing was changed; use "
            "precision.smoothing=auto to smooth only where the graph allows"
        )
    rec = smoothing.record(groups, alpha, mode)
    if not groups:
        rec["note"] = "no activation is read by a MatMul with constant weights: graph unchanged"
    return groups, rec
