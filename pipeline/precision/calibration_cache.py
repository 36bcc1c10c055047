"""Where calibration results are cached (ModelOpt Q/DQ graphs, TensorRT 10 calibration
caches): one folder per user by default, shared by every clone and experiment
workspace that names the same data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core.locations import cache_folder

CACHE_ENV = "TRT_PIPELINE_CALIB_CACHE"


def cache_location(calibration_cfg: Any) -> tuple[Path, str]:
    """(folder, what chose it): calibration.cache_dir, $TRT_PIPELINE_CALIB_CACHE, or
    the user cache folder's trt-pipeline/calibration."""
    return cache_folder(getattr(calibration_cfg, "cache_dir", None), CACHE_ENV, "calibration")


def cache_root(calibration_cfg: Any) -> Path:
    return cache_location(calibration_cfg)[0]
