"""Where each store lives: one folder per user by default (the platform's user cache
folder, XDG on Linux), shared by every clone and every DVC experiment workspace; a
setting or an environment variable points a team at a group folder instead. Every
store (engines, calibration results, reused sweep jobs) is found the same way."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

APP = "trt-pipeline"


def user_cache(sub: str) -> Path:
    """$XDG_CACHE_HOME/trt-pipeline/<sub>, else ~/.cache/trt-pipeline/<sub> (the
    platform's equivalent elsewhere)."""
    import platformdirs

    return platformdirs.user_cache_path(APP) / sub


@dataclass(frozen=True)
class Place:
    """One kind of store: the environment variable that moves it and its folder under
    the user cache."""

    env: str
    sub: str

    def location(self, configured: str | None = None) -> tuple[Path, str]:
        """(folder, what chose it): the setting, else $env, else the user cache folder."""
        if configured:
            return Path(configured).expanduser(), "setting"
        if os.environ.get(self.env):
            return Path(os.environ[self.env]).expanduser(), f"${self.env}"
        return user_cache(self.sub), "user cache folder"

    def root(self, configured: str | None = None) -> Path:
        return self.location(configured)[0]


# build.store_dir, else $TRT_PIPELINE_STORE, else <user cache>/trt-pipeline/engines
ENGINES = Place("TRT_PIPELINE_STORE", "engines")
# calibration.cache_dir, else $TRT_PIPELINE_CALIB_CACHE, else <user cache>/trt-pipeline/calibration
CALIBRATION = Place("TRT_PIPELINE_CALIB_CACHE", "calibration")
