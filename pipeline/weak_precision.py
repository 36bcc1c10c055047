"""Legacy weak typing (precision.mode=weak) for hosts that still run TensorRT 10:
the graph stays fp32, builder flags pick the precision, and int8 is calibrated
implicitly by TensorRT through Polygraphy's Calibrator with a calibration cache.

Two halves: `prepare` runs in the calibrate step (CPU, no TensorRT) and leaves the
calibration inputs beside the graph; `configure` runs in the build, on the builder
config, and refuses TensorRT-RTX and TensorRT 11, which no longer have these flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import backend, calibration_data, export, fileio
from pipeline.errors import PipelineError
from pipeline.layout import WEAK_CALIBRATION_INPUTS as INPUTS_FILE

FLAGS = {"fp32": [], "tf32": [], "fp16": ["FP16"], "bf16": ["BF16"], "int8": ["INT8"]}
CALIBRATORS = {"entropy": "IInt8EntropyCalibrator2", "max": "IInt8MinMaxCalibrator",
               "minmax": "IInt8MinMaxCalibrator"}
STRONG_HINT = "use precision.mode=strong (the precision comes from the graph: AutoCast or Q/DQ)"


def prepare(src: Path, out_dir: Path, precision_cfg: Any, calibration_cfg: Any, model_cfg: Any) -> dict:
    """The weak_typing section of calibration.json; for int8 also writes INPUTS_FILE."""
    name = precision_cfg.name
    if name not in FLAGS:
        raise PipelineError(f"precision={name} with precision.mode=weak: TensorRT 10 has no implicit {name} "
                            f"calibration; {STRONG_HINT}")
    info: dict[str, Any] = {"flags": FLAGS[name]}
    if name != "int8":
        return info
    if calibration_cfg.method not in CALIBRATORS:
        raise PipelineError(f"calibration.method={calibration_cfg.method} is not a TensorRT 10 calibrator; "
                            f"use one of {', '.join(CALIBRATORS)}")
    data = calibration_data.load(calibration_cfg, model_cfg, src)
    # A calibration profile has one shape, so every batch must have the first one's.
    first = {k: v.shape for k, v in data.batches[0].items()}
    batches = [b for b in data.batches if {k: v.shape for k, v in b.items()} == first]
    fileio.write_npz(out_dir / INPUTS_FILE, {export.reference_key("in", i, k): v
                                              for i, b in enumerate(batches) for k, v in b.items()})
    calibrator = CALIBRATORS[calibration_cfg.method]
    key = fileio.sha256_bytes(f"{fileio.sha256_file(src)}|{data.info['sha256']}|{calibrator}".encode())
    return {**info, "calibrator": calibrator, "inputs_file": INPUTS_FILE, "batches_used": len(batches),
            "batches_dropped": len(data.batches) - len(batches), "data": data.info, "cache_key": key,
            "cache_dir": calibration_cfg.cache_dir}


def configure(trt, builder, network, config, calibrate_dir: Path) -> dict:
    """Set the builder flags (and the int8 calibrator) that prepare() recorded."""
    if backend.is_strongly_typed_only(trt):
        raise PipelineError(f"precision.mode=weak needs TensorRT 10 builder precision flags, which "
                            f"{trt.__name__} {trt.__version__} does not have; {STRONG_HINT}")
    summary = fileio.read_json(Path(calibrate_dir) / "calibration.json", "calibration summary")
    info = summary.get("weak_typing")
    if info is None:
        raise PipelineError("calibration.json has no weak_typing section: rerun calibrate with precision.mode=weak")
    for flag in info["flags"]:
        if flag not in trt.BuilderFlag.__members__:
            raise PipelineError(f"{trt.__name__} {trt.__version__} has no BuilderFlag.{flag}; {STRONG_HINT}")
        config.set_flag(trt.BuilderFlag.__members__[flag])
    if "calibrator" not in info:
        return {"flags": info["flags"]}
    batches = [feeds for feeds, _ in export.split_reference(
        fileio.read_npz(Path(calibrate_dir) / info["inputs_file"], "calibration inputs"))]
    profile = builder.create_optimization_profile()
    for name, array in batches[0].items():
        profile.set_shape(name, array.shape, array.shape, array.shape)
    config.set_calibration_profile(profile)
    path = _cache_path(info, trt)
    config.int8_calibrator = _calibrator(trt, info["calibrator"], batches, path)
    return {"flags": info["flags"], "calibrator": info["calibrator"], "calibration_cache": str(path),
            "calibration_cache_hit": path.exists()}


def _cache_path(info: dict, trt) -> Path:
    from types import SimpleNamespace

    from pipeline.quantize import cache_root

    root = cache_root(SimpleNamespace(cache_dir=info.get("cache_dir")))
    # TensorRT rejects a cache from another version, so the version is in the name.
    return root / info["cache_key"] / f"trt-{trt.__version__}-{info['calibrator']}.cache"


def _calibrator(trt, base_name: str, batches: list[dict], path: Path):
    """Polygraphy's Calibrator, with a cache written atomically and checked against its
    sha256 on read, so a torn or edited cache recalibrates instead of misleading TensorRT."""
    from polygraphy.backend.trt import Calibrator

    proto = Calibrator(batches, cache=None, BaseClass=getattr(trt, base_name))
    digest = path.with_suffix(".sha256")

    class VerifiedCacheCalibrator(type(proto)):
        def read_calibration_cache(self):
            try:
                data = path.read_bytes()
                ok = digest.read_text().strip() == fileio.sha256_bytes(data)
            except OSError:
                return None
            return data if ok and data else None

        def write_calibration_cache(self, cache):
            data = bytes(memoryview(cache))
            fileio.write_bytes(path, data)
            fileio.write_text(digest, fileio.sha256_bytes(data) + "\n")

    return VerifiedCacheCalibrator()
