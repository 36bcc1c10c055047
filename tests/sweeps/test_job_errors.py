"""No exception of a job ends a sweep: a joblib multirun where one job's model factory
raises an exception this tool knows nothing about (as TensorRT's RuntimeError once did
from a build) still runs every job, writes that job's error.txt and the summary with a
row for it, and exits 1 with one line per failure and no traceback."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.helpers import SWEEP_FAST as FAST

# The passing job's factory lives beside it, since model.source must hold a job's factory.
FINE = "from pipeline.zoo.cnn_classifier import *  # noqa: F403\n"
BOOM = """
INPUT_NAMES = ["images"]
OUTPUT_NAMES = ["logits"]


def build(seed=0):
    raise RuntimeError("min input provided for shape tensor is inconsistent with other inputs.")
"""


@pytest.mark.e2e
def test_an_unexpected_exception_is_one_job_s_error_and_a_summary_row(tmp_path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "boom.py").write_text(BOOM)
    (tmp_path / "mods" / "fine.py").write_text(FINE)
    env = {
        **os.environ,
        "TRT_PIPELINE_STORE": str(tmp_path / "store"),
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods"), os.environ.get("PYTHONPATH", "")]),
    }
    sweep = tmp_path / "s"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli.run",
            "--multirun",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={sweep}",
            "build.backend=tensorrt_rtx",
            "model=cnn",
            "model.factory=boom,fine",
            f"model.source={tmp_path / 'mods'}",
            *FAST,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert any("RuntimeError: min input provided for shape tensor" in e for e in errors), errors
    assert errors[-1].startswith("error: 1 of 2 jobs failed"), errors
    rows = {
        ("boom" if "factory=boom" in row["job"] else "fine"): row
        for row in csv.DictReader((sweep / "sweep_summary.csv").open())
    }
    assert len(rows) == 2, rows
    assert rows["boom"]["gates"].startswith("job failed: RuntimeError: min input provided"), rows
    assert rows["fine"]["gates"] == "passed", rows
    [boom] = sweep.glob("*factory=boom*")
    assert (boom / "error.txt").read_text().startswith("RuntimeError: min input provided")
    assert not (boom / "result.json").exists()
    assert "Traceback" in (boom / "traceback.txt").read_text()  # kept for whoever debugs it
    assert "Traceback" not in r.stdout  # and not on the sweep's console
