"""Where calibration results are cached (ModelOpt Q/DQ graphs, TensorRT 10 calibration
caches): one folder, shared by every run that names the same data."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CACHE_ENV = "TRT_PIPELINE_CALIB_CACHE"


def cache_root(calibration_cfg: Any) -> Path:
    configured = getattr(calibration_cfg, "cache_dir", None)
    return Path(configured or os.environ.get(CACHE_ENV) or Path.cwd() / ".cache" / "calibration")
