"""Stores written by an older version stay hits: the engine store and the calibration
cache that the code before the typed-core refactor (issue 29) wrote are served by the code
of today without recalibrating or rebuilding. The old code is taken from this clone's
history and run as it was; only the stores are shared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from tests.conftest import REPO, copy_repo

pytestmark = pytest.mark.e2e

BEFORE = "9107e4d^"  # the last commit before issue 29's first step
CONFIG = ("model=cnn", "precision=int8", "calibration=cnn_samples")


def _tree(rev: str, dest: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def _through_build(tree: Path, stores: Path) -> str:
    """Params for CONFIG, then fingerprint..build with `tree`'s own code; the build's output."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "TRT_PIPELINE_STORE": str(stores / "engines"),
        "TRT_PIPELINE_CALIB_CACHE": str(stores / "calibration"),
    }
    out = ""
    for argv in (["pipeline", "params", *CONFIG], *[[f"stages.{s}"] for s in STAGES]):
        r = subprocess.run(
            [sys.executable, "-m", *argv], cwd=tree, env=env, capture_output=True, text=True
        )
        assert r.returncode == 0, f"{tree.name}: {argv}\n{r.stdout}\n{r.stderr}"
        out = r.stdout + r.stderr
    return out


STAGES = ("fingerprint", "export", "calibrate", "build")


def test_stores_written_before_the_refactor_are_hits_after_it(tmp_path):
    known = subprocess.run(["git", "cat-file", "-e", f"{BEFORE}^{{commit}}"], cwd=REPO)
    if known.returncode != 0:
        pytest.skip(f"this clone lacks the history to {BEFORE} (a shallow clone)")
    stores = tmp_path / "stores"
    old = _through_build(_tree(BEFORE, tmp_path / "old"), stores)
    assert "engine store miss, built" in old, old
    (tmp_path / "new").mkdir()
    new = _through_build(copy_repo(tmp_path / "new"), stores)
    assert "engine store hit" in new, new
    summary = json.loads((tmp_path / "new/artifacts/calibrate/calibration.json").read_text())
    assert summary["calibration"]["cache"]["hit"] is True
    built = {
        tree: json.loads(
            next((tmp_path / tree / "artifacts/build").glob("*/manifest.json")).read_text()
        )
        for tree in ("old", "new")
    }
    assert built["new"]["cache_key"] == built["old"]["cache_key"]
    assert built["new"]["engine"]["sha256"] == built["old"]["engine"]["sha256"]
