"""ModelOpt's own int8/fp8 quantization of a graph (calibration.streaming off, or
precision.qdq_placement=modelopt): its Q/DQ graph as a calibration cache entry, and its
failures said in one line (qdq/quantize.py caches and reads it)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core import console
from pipeline.core.errors import NothingToQuantize, PipelineError, first_line
from pipeline.graph import onnx_model
from pipeline.precision.calibration import cache, reader

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.core.config import CalibrationConfig
    from pipeline.inputs.calibration_data import CalibrationSet
    from pipeline.store import FileData

# fp32 keeps the unquantized layers as the source graph has them; TensorRT picks no
# other precision for them in a strongly typed build.
HIGH_PRECISION = "fp32"


class HistogramFailed(PipelineError):
    """ModelOpt's entropy calibration could not histogram a tensor (numpy refuses bins of
    zero width at a magnitude like 3.4e38); max calibration reads the same data."""


def _failure(e: Exception, mode: str, method: str) -> PipelineError:
    """ModelOpt's failure in one line; HistogramFailed where entropy calibration could not
    histogram a tensor (the caller calibrates by max then)."""
    detail = first_line(e)
    if method == "entropy" and "Too many bins" in detail:
        return HistogramFailed(
            f"entropy calibration cannot histogram this graph ({detail.rstrip('.')}: a tensor "
            f"whose values are all one huge number, as a float-min attention mask is)"
        )
    return PipelineError(f"ModelOpt {mode} quantization failed: {detail}")


def _input_copy(model: ModelProto, base: Path, work: Path) -> tuple[Path, bool]:
    """`model` written where ModelOpt reads it, and whether it keeps external data there.
    ModelOpt reads a file and writes intermediate graphs beside it: a folder of its own,
    holding copies of the external data (onnx refuses linked data files)."""
    (work / "in").mkdir()
    src = work / "in" / "model.onnx"
    external = cache.copy_external(model, base, src.parent)
    # ModelOpt compares input dims as numbers or names: an axis with neither (a batch an
    # exporter wrote as -1) fails its checks, so its copy names them.
    with onnx_model.unnamed_dims_named(model):
        external += onnx_model.save_copy(model, src)[1:]  # SmoothQuant's, past the limit
    return src, bool(external)


def run_modelopt(
    model: ModelProto,
    base: Path,
    work: Path,
    mode: str,
    method: str,
    calibration_cfg: CalibrationConfig,
    data: CalibrationSet,
    op_types: list[str] | None = None,
) -> tuple[dict[str, FileData], dict[str, int]]:
    """The Q/DQ graph ModelOpt makes of `model` (the smoothed, opset-normalised fp32
    graph, its external data in `base`) as a cache entry's files, and its op histogram;
    `op_types`: the op types it quantizes (None: every one it can).
    ModelOpt writes a graph past 2 GB with its weights in one file beside it, in `work`."""
    from pipeline.precision.common.modelopt_log import quiet_modelopt

    try:
        from modelopt.onnx.quantization import quantize as mo_quantize
    except ImportError as e:
        raise PipelineError(
            f"int8/fp8 need nvidia-modelopt with its ONNX dependencies: {e}"
        ) from None
    work = work.resolve()  # ModelOpt runs in `work` (quiet_modelopt): every path absolute
    src, external = _input_copy(model, base, work)
    out = work / "model.qdq.onnx"
    with console.bar(total=len(data.batches), desc=f"calibrating {mode}", unit="batch") as bar:
        try:
            with quiet_modelopt(work):
                mo_quantize(
                    onnx_path=str(src),
                    quantize_mode=mode,
                    calibration_method=method,
                    calibration_data_reader=reader.reader(data.batches, bar),
                    calibration_eps=["cpu"],
                    output_path=str(out),
                    op_types_to_quantize=op_types,
                    op_types_to_exclude=list(calibration_cfg.exclude_op_types) or None,
                    nodes_to_exclude=list(calibration_cfg.exclude_nodes) or None,
                    high_precision_dtype=HIGH_PRECISION,
                    use_external_data_format=external,
                    log_level="WARNING",
                )
        except Exception as e:
            raise _failure(e, mode, method) from None
    if not out.is_file():
        raise PipelineError(f"ModelOpt {mode} quantization wrote no model")
    shutil.rmtree(src.parent)  # the input's copy of the weights: not needed past here
    files = cache.entry_files(out)
    ops = onnx_model.op_histogram(cache.read_graph_at(out))
    if not ops.get("QuantizeLinear"):
        raise NothingToQuantize(
            f"ModelOpt quantized no node to {mode} (excluded: nodes {list(calibration_cfg.exclude_nodes)}"
            f", op types {list(calibration_cfg.exclude_op_types)})"
        )
    return files, ops
