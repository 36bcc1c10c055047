"""Legacy weak typing (precision.mode=weak) for hosts that still run TensorRT 10:
the graph stays fp32, builder flags pick the precision, and int8 is calibrated
implicitly by TensorRT through Polygraphy's Calibrator with a calibration cache.

Two halves: `prepare` (here) runs in the calibrate step (CPU, no TensorRT) and leaves
the calibration inputs beside the graph; pipeline.engine.weak_typing runs in the build,
on the builder config, and refuses TensorRT-RTX and TensorRT 11, which no longer have
these flags."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core import fileio, hashing
from pipeline.core.errors import PipelineError
from pipeline.core.layout import WEAK_CALIBRATION_INPUTS as INPUTS_FILE
from pipeline.inputs import calibration_data, reference_file
from pipeline.records.calibration_file import WeakTypingRecord

if TYPE_CHECKING:
    from pipeline.core.config import CalibrationConfig, ModelConfig, PrecisionConfig

FLAGS = {"fp32": [], "tf32": [], "fp16": ["FP16"], "bf16": ["BF16"], "int8": ["INT8"]}
CALIBRATORS = {
    "entropy": "IInt8EntropyCalibrator2",
    "max": "IInt8MinMaxCalibrator",
    "minmax": "IInt8MinMaxCalibrator",
}
STRONG_HINT = "use precision.mode=strong (the precision comes from the graph: AutoCast or Q/DQ)"


def prepare(
    src: Path,
    out_dir: Path,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
) -> WeakTypingRecord:
    """The weak_typing section of calibration.json; for int8 also writes INPUTS_FILE."""
    name = precision_cfg.name
    if name not in FLAGS:
        raise PipelineError(
            f"precision={name} with precision.mode=weak: TensorRT 10 has no implicit {name} "
            f"calibration; {STRONG_HINT}"
        )
    info: WeakTypingRecord = {"flags": FLAGS[name]}
    if name != "int8":
        return info
    if calibration_cfg.method not in CALIBRATORS:
        raise PipelineError(
            f"calibration.method={calibration_cfg.method} is not a TensorRT 10 calibrator; "
            f"use one of {', '.join(CALIBRATORS)}"
        )
    data = calibration_data.load(calibration_cfg, model_cfg, src)
    # A calibration profile has one shape, so every batch must have the first one's.
    first = {k: v.shape for k, v in data.batches[0].items()}
    batches = [b for b in data.batches if {k: v.shape for k, v in b.items()} == first]
    fileio.write_npz(
        out_dir / INPUTS_FILE,
        {reference_file.key("in", i, k): v for i, b in enumerate(batches) for k, v in b.items()},
    )
    calibrator = CALIBRATORS[calibration_cfg.method]
    key = hashing.sha256_bytes(
        f"{hashing.sha256_file(src)}|{data.info['sha256']}|{calibrator}".encode()
    )
    return {
        **info,
        "calibrator": calibrator,
        "inputs_file": INPUTS_FILE,
        "batches_used": len(batches),
        "batches_dropped": len(data.batches) - len(batches),
        "data": data.info,
        "cache_key": key,
        "cache_dir": calibration_cfg.cache_dir,
    }
