"""Legacy weak typing in the build (precision.mode=weak, TensorRT 10): builder flags
and the implicit int8 calibrator that pipeline.precision.weak_precision.prepare recorded
in calibration.json. TensorRT 11 and TensorRT-RTX no longer have either: refused here,
in one place."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any, cast

from pipeline.core import fileio, hashing
from pipeline.core.errors import PipelineError
from pipeline.core.layout import CALIBRATION_SUMMARY
from pipeline.core.layout import WEAK_CALIBRATION_INPUTS as INPUTS_FILE
from pipeline.engine import backend
from pipeline.inputs import reference_file
from pipeline.precision.weak_precision import CALIBRATORS, STRONG_HINT
from pipeline.records import calibration_file
from pipeline.records.build_file import WeakTypingSettings
from pipeline.records.calibration_file import WeakTypingRecord
from pipeline.store import CALIBRATION, SHA256


def refuse_if_strongly_typed_only(trt: ModuleType) -> None:
    if backend.is_strongly_typed_only(trt):
        raise PipelineError(
            f"precision.mode=weak needs TensorRT 10 builder precision flags, which "
            f"{trt.__name__} {trt.__version__} does not have; {STRONG_HINT}"
        )


def configure(
    trt: ModuleType, builder: Any, network: Any, config: Any, calibrate_dir: Path
) -> WeakTypingSettings:
    """Set the builder flags (and the int8 calibrator) that prepare() recorded."""
    refuse_if_strongly_typed_only(trt)
    summary = calibration_file.read(Path(calibrate_dir) / CALIBRATION_SUMMARY)
    info = checked_info(summary.get("weak_typing") if isinstance(summary, dict) else None)
    for flag in info["flags"]:
        if flag not in trt.BuilderFlag.__members__:
            raise PipelineError(
                f"{trt.__name__} {trt.__version__} has no BuilderFlag.{flag}; {STRONG_HINT}"
            )
        config.set_flag(trt.BuilderFlag.__members__[flag])
    if "calibrator" not in info:
        return {"flags": info["flags"]}
    batches = [
        feeds
        for feeds, _ in reference_file.split(
            fileio.read_npz(Path(calibrate_dir) / info["inputs_file"], "calibration inputs")
        )
    ]
    profile = builder.create_optimization_profile()
    for name, array in batches[0].items():
        profile.set_shape(name, array.shape, array.shape, array.shape)
    config.set_calibration_profile(profile)
    path = _cache_path(info, trt)
    config.int8_calibrator = _calibrator(trt, info["calibrator"], batches, path)
    return {
        "flags": info["flags"],
        "calibrator": info["calibrator"],
        "calibration_cache": str(path),
        "calibration_cache_hit": path.exists(),
    }


def checked_info(info: Any) -> WeakTypingRecord:
    """calibration.json's weak_typing section, refused unless it is what prepare()
    writes: its file names and cache key become paths, so none may point elsewhere."""
    if info is None:
        raise PipelineError(
            "calibration.json has no weak_typing section: rerun calibrate with precision.mode=weak"
        )
    if not isinstance(info, dict) or not isinstance(info.get("flags"), list):
        raise PipelineError(
            "calibration.json: weak_typing is not what calibrate writes; rerun calibrate"
        )
    if "calibrator" in info and (
        info["calibrator"] not in CALIBRATORS.values()
        or info.get("inputs_file") != INPUTS_FILE
        or not SHA256.match(str(info.get("cache_key")))
    ):
        raise PipelineError(
            "calibration.json: weak_typing calibrator, inputs_file or cache_key is not what "
            "calibrate writes (edited?); rerun calibrate"
        )
    return cast(WeakTypingRecord, info)


def _cache_path(info: WeakTypingRecord, trt: ModuleType) -> Path:

    root = CALIBRATION.root(info.get("cache_dir"))
    # TensorRT rejects a cache from another version, so the version is in the name.
    path: Path = root / info["cache_key"] / f"trt-{trt.__version__}-{info['calibrator']}.cache"
    return path


def _calibrator(trt: ModuleType, base_name: str, batches: list[dict[str, Any]], path: Path) -> Any:
    """Polygraphy's Calibrator, with a cache written atomically and checked against its
    sha256 on read, so a torn or edited cache recalibrates instead of misleading TensorRT."""
    from polygraphy.backend.trt import Calibrator

    proto = Calibrator(batches, cache=None, BaseClass=getattr(trt, base_name))
    digest = path.with_suffix(".sha256")

    # Polygraphy makes its Calibrator class at run time, on the flavour's base class:
    # a type known only then (and neither library ships type information).
    class VerifiedCacheCalibrator(type(proto)):  # type: ignore[misc]
        def read_calibration_cache(self) -> bytes | None:
            try:
                data = path.read_bytes()
                ok = digest.read_text().strip() == hashing.sha256_bytes(data)
            except OSError:
                return None
            return data if ok and data else None

        def write_calibration_cache(self, cache: Any) -> None:
            data = bytes(memoryview(cache))
            fileio.write_bytes(path, data)
            fileio.write_text(digest, hashing.sha256_bytes(data) + "\n")

    return VerifiedCacheCalibrator()
