"""Where the per-user caches live: one folder per user (the platform's user cache
folder, XDG on Linux), shared by every clone and every DVC experiment workspace;
a setting or an environment variable points a team at a group folder instead."""

from __future__ import annotations

import os
from pathlib import Path

APP = "trt-pipeline"


def user_cache(sub: str) -> Path:
    """$XDG_CACHE_HOME/trt-pipeline/<sub>, else ~/.cache/trt-pipeline/<sub> (the
    platform's equivalent elsewhere)."""
    import platformdirs

    return platformdirs.user_cache_path(APP) / sub


def cache_folder(configured: str | None, env: str, sub: str) -> tuple[Path, str]:
    """(folder, what chose it): the setting, else $env, else the user cache folder."""
    if configured:
        return Path(configured).expanduser(), "setting"
    if os.environ.get(env):
        return Path(os.environ[env]).expanduser(), f"${env}"
    return user_cache(sub), "user cache folder"
