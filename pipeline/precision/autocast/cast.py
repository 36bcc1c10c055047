"""ModelOpt AutoCast (fp16/bf16), behind the calibration cache.

AutoCast is a pure function of the fp32 graph, the activation data it measures ranges on
and its settings, so its result is cached by content like a Q/DQ graph (qdq/quantize.py): a
sweep over profiles, GPU models or builder settings casts each graph once, and a hit
imports no ModelOpt. On a real model the cast takes seconds to minutes; on 2 cores the
import alone (~0.8 s) is paid by every sweep worker that casts."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

import numpy as np

from pipeline.core import fileio, hashing
from pipeline.core.errors import PipelineError, first_line
from pipeline.graph import onnx_model
from pipeline.precision.calibration import cache
from pipeline.precision.calibration.cache import LibraryVersions, library_versions
from pipeline.precision.common import streamed
from pipeline.store import FileData

if TYPE_CHECKING:
    from pipeline.core.config import CalibrationConfig, PrecisionConfig
    from pipeline.records.calibration_file import TablesRecord

# 2: the cast graph carries no intermediate shape annotations (see _convert).
KEY_VERSION = 2
SETTINGS = (
    "low_precision_type",
    "keep_fp32_nodes",
    "keep_fp32_op_types",
    "data_max",
    "init_max",
    "keep_io_types",
)


def fp16_of(precision_cfg: PrecisionConfig) -> PrecisionConfig:
    """What precision=fp16 casts with, keeping this run's AutoCast settings: the fp16 graph
    a quantized run is held against, and precision=auto's answer where no mix beats it."""
    from omegaconf import OmegaConf

    change = {"name": "fp16", "transform": "autocast", "low_precision_type": "fp16"}
    # merge() gives a DictConfig of the same schema: still a PrecisionConfig to its readers
    return cast("PrecisionConfig", OmegaConf.merge(precision_cfg, change))


class AutocastKey(LibraryVersions):
    """AutoCast's cache key: what the cast graph depends on."""

    key_version: int
    transform: str  # "autocast"
    onnx_sha256: str
    data_sha256: str  # the activations' data it measures ranges on
    settings: dict[str, Any]  # each of SETTINGS as precision.* holds it, as JSON
    calibrated_by: NotRequired[str]  # STREAMED, where the cast is streamed


def key_inputs(
    src: Path, precision_cfg: PrecisionConfig, calib_inputs: dict[str, np.ndarray]
) -> AutocastKey:
    settings = {k: getattr(precision_cfg, k) for k in SETTINGS}
    return {
        "key_version": KEY_VERSION,
        "transform": "autocast",
        "onnx_sha256": onnx_model.sha256(src),
        "data_sha256": hashing.sha256_bytes(fileio.npz_bytes(calib_inputs)),
        "settings": {
            k: v if v is None or isinstance(v, (str, int, float, bool)) else list(v)
            for k, v in settings.items()
        },
        **library_versions(),
    }


class AutocastRecord(TypedDict):
    """calibration.json's `autocast` (and int4's activations'): how the graph was cast."""

    calibrated_by: str  # "modelopt", or STREAMED
    low_precision_type: str | None  # "fp16", "bf16"
    modelopt_version: str
    cache: dict[str, Any]  # the calibration cache's record of the cast: key, hit
    tables: NotRequired[TablesRecord]  # the embedding tables cast after it (transform.py)


def autocast(
    src: Path,
    dest: Path,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    calib_inputs: dict[str, np.ndarray],
) -> AutocastRecord:
    """Write dest (the fp16/bf16 graph); return what the calibration summary records."""
    inputs = key_inputs(src, precision_cfg, calib_inputs)
    stream = streamed.chosen(
        calibration_cfg, None, onnx_model.load(src, check=False, weights=False)
    )
    if stream:  # the same cast by other means: its own entries (old keys unchanged)
        inputs["calibrated_by"] = STREAMED
    key = hashing.sha256_json(inputs)
    with tempfile.TemporaryDirectory(prefix="autocast.") as tmp:
        got, cache_record = cache.cached(
            calibration_cfg,
            key,
            lambda: (
                _convert(src, Path(tmp), precision_cfg, calib_inputs, stream),
                dict(inputs),  # the entry's labels: a plain dict to the store
                "miss",
            ),
            "AutoCast result",
        )
        cache.write_graph(got, dest)
    return {
        "calibrated_by": STREAMED if stream else "modelopt",
        "low_precision_type": precision_cfg.low_precision_type,
        "modelopt_version": inputs["nvidia-modelopt"],
        "cache": cache_record,
    }


# What calibration.json says made the cast when it was streamed (autocast/streamed.py).
STREAMED = "streamed AutoCast (ModelOpt's classifier and converter, weights read from their files)"


def _convert(
    src: Path,
    work: Path,
    precision_cfg: PrecisionConfig,
    calib_inputs: dict[str, np.ndarray],
    stream: bool = False,
) -> dict[str, FileData]:
    """The cast graph as a cache entry's files: the graph, and past the inline limit (or
    when streamed and some weights stay in the source's files) one external-data file,
    written in `work` and left on disk."""
    if stream:
        return _streamed(src, work, precision_cfg, calib_inputs)
    try:
        from modelopt.onnx.autocast import convert_to_mixed_precision
    except ImportError as e:
        raise PipelineError(
            f"fp16/bf16 need nvidia-modelopt with its ONNX dependencies: {e}"
        ) from None
    from pipeline.precision.autocast.linear_cleanup import linear_cleanup
    from pipeline.precision.common.modelopt_log import quiet_modelopt

    # A folder of one .npz: AutoCast feeds each file as it is. A single .npz it would split
    # along axis 0 of the first input, which fails on a rank-0 input (a sample rate) and
    # cuts recurrent state [layers, batch, hidden] along its layers.
    # absolute before ModelOpt runs in `work` (quiet_modelopt): a stage's paths are relative
    src, work = src.resolve(), work.resolve()
    src = _captures_renamed(src, work)
    calib = work / "autocast_calibration"
    calib.mkdir()
    np.savez(calib / "batch.npz", **calib_inputs)  # type: ignore[arg-type]  # numpy's stub types **kwds as allow_pickle
    try:
        with quiet_modelopt(work), linear_cleanup():
            model = convert_to_mixed_precision(
                onnx_path=str(src),
                low_precision_type=precision_cfg.low_precision_type,
                nodes_to_exclude=list(precision_cfg.keep_fp32_nodes) or None,
                op_types_to_exclude=list(precision_cfg.keep_fp32_op_types) or None,
                data_max=float(precision_cfg.data_max),
                init_max=float(precision_cfg.init_max),
                keep_io_types=bool(precision_cfg.keep_io_types),
                calibration_data=str(calib),
                providers=["cpu"],
            )
    except PipelineError:
        raise
    except Exception as e:
        raise _failed(precision_cfg, e) from None
    onnx_model.drop_intermediate_shapes(model)
    return cache.graph_files(model, work)


def _captures_renamed(src: Path, work: Path) -> Path:
    """src, or a copy in `work` where subgraphs that share a capture each get their own
    name for it (autocast/captures.py: AutoCast names its casts after the tensor)."""
    from pipeline.precision.autocast import captures

    model = onnx_model.load(src, check=False, weights=False)
    if not any(True for n in model.graph.node for _ in onnx_model.subgraphs(n)):
        return src
    model = onnx_model.load(src, check=False)
    if not captures.one_per_subgraph(model):
        return src
    onnx_model.save(model, work / "captures.onnx")
    return work / "captures.onnx"


def _streamed(
    src: Path, work: Path, precision_cfg: PrecisionConfig, calib_inputs: dict[str, np.ndarray]
) -> dict[str, FileData]:
    from pipeline.graph.external_data import write_gathered
    from pipeline.precision.autocast.streamed import convert
    from pipeline.precision.common.modelopt_log import quiet_modelopt

    folder = work / "weights"  # copies of the source's data files, and the cast weights
    folder.mkdir()
    try:
        with quiet_modelopt():
            model = convert(src, folder, precision_cfg, calib_inputs)
    except PipelineError:
        raise
    except Exception as e:
        raise _failed(precision_cfg, e) from None
    onnx_model.drop_intermediate_shapes(model)
    return cache.entry_files(write_gathered(model, folder, work / "model.onnx")[0])


def _failed(precision_cfg: PrecisionConfig, e: Exception) -> PipelineError:
    """ModelOpt's failure inside AutoCast, in one line."""
    return PipelineError(f"AutoCast to {precision_cfg.low_precision_type} failed: {first_line(e)}")
