"""A model past protobuf's 2 GB through the stages, each its own process as DVC runs it:
weights of 2.2 GB in one external-data file and in 200, compute of one Gather and a small
MatMul (models/large_table.py), written outside the repository. Each stage's peak RSS
(the peak_rss_mib it records, below what wait4 saw) is held to the goals of
issue 22: export and calibrate-fp32 <= 1.5x the model's bytes; inspect (graphs read without
their weights) and the benchmark (ONNX Runtime holds them once) to what their work needs.

The build is TensorRT-RTX's on 2 cores: 9-20 s and 6.7 GB peak RSS at this size, each
layout (TensorRT's own cost; the build stage against a bare build is
benchmarks/large_model.py's measure). The whole module takes about a minute and a half.
fp16/int8 go through ModelOpt, which loads the whole model several times over (13.6 GB
peak and over 2 minutes for AutoCast at this size): too slow for this suite, so they run
here on the same model shapes at a smaller size in test_precisions_keep_external_data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from models import large_table
from tests.conftest import FAST_BENCH, copy_repo

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MIB = 2200  # past 2 GiB (2048 MiB): one protobuf message could not hold it
RSS_GOAL = {"export": 1.5, "calibrate": 1.5}
# Not in the list; what the work needs: the report reads graphs without their
# weights, the benchmark's ONNX Runtime session holds them once.
RSS_LIMIT = {"inspect": 0.25, "benchmark": 1.5}


def run_stage(repo: Path, name: str) -> tuple[float, int]:
    """(seconds, peak RSS bytes) of `python -m stages.<name>` in repo."""
    with tempfile.TemporaryFile() as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", f"stages.{name}"], cwd=repo, stdout=log, stderr=log
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        assert proc.returncode == 0, f"stages.{name}: {log.read().decode()[-3000:]}"
    return time.perf_counter() - t0, usage.ru_maxrss * 1024


def params(repo: Path, *overrides: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "params", *overrides],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def model_params(model: Path) -> list[str]:
    return [
        "model=onnx_file",
        f"model.onnx_path={model}",
        f"model.source={model.parent}",
        "model.task=regression",
        "model.int_high=1000",  # below every table's rows (models/large_table.py)
        "model.sample_dims.batch=2",
        "+model.sample_dims.seq=16",
        "model.num_reference_batches=2",
    ]


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def recorded_peak(repo: Path, stage: str) -> float:
    return float(
        json.loads((repo / "metrics/memory" / f"{stage}.json").read_text())["peak_rss_mib"]
    )


@pytest.fixture
def big_folders(tmp_path_factory, monkeypatch):
    """Two folders (the model outside the repository; the repository and its engine store)
    removed after the test: pytest keeps the last runs' temporary folders, and these hold
    ~10 GB."""
    made = [tmp_path_factory.mktemp("large"), tmp_path_factory.mktemp("repo")]
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(made[1] / "store"))
    yield made
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("files", [1, 200])
def test_past_2gb_through_every_stage(big_folders, files):
    outside, repo_parent = big_folders
    model = large_table.write(outside / "model", mib=MIB, files=files)
    weights = folder_bytes(model.parent)
    assert weights > 2 << 30
    repo = copy_repo(repo_parent / "repo")
    params(repo, *model_params(model), *FAST_BENCH)
    figures = {}
    for name in ("fingerprint", "export", "calibrate", "build", "inspect", "benchmark"):
        figures[name] = run_stage(repo, name)
    artifacts = repo / "artifacts"
    for out in ("export", "calibrate"):
        graph = artifacts / out / "model.onnx"
        # the graph file holds no weights; the data files came along beside it
        assert graph.stat().st_size < 1 << 20
        assert folder_bytes(graph.parent) >= weights
    # The stage's own record (VmHWM) is held to the goals. wait4's figure is an upper bound
    # of it only: exec carries the parent's peak into it, and this pytest process may by now
    # be larger than a small stage.
    goals = {**RSS_GOAL, **RSS_LIMIT}
    for stage, goal in goals.items():
        peak = recorded_peak(repo, stage) * 2**20
        assert peak <= goal * weights, (
            f"{stage}: peak RSS {peak / 2**30:.2f} GiB is over {goal}x the "
            f"model's {weights / 2**30:.2f} GiB"
        )
        assert peak <= 1.02 * figures[stage][1], (stage, peak, figures[stage][1])
    assert (artifacts / "inspect" / "report.html").stat().st_size < 2 << 20
    bench = json.loads((repo / "metrics" / "benchmark.json").read_text())
    assert bench["results"]["onnxruntime"]["status"] == "ok", bench["results"]
    calib = json.loads((artifacts / "calibrate" / "calibration.json").read_text())
    assert calib["gate_passed"] is True
    assert calib["accuracy"]  # the fp32 graph judged against the user's file: equal
    engines = list((artifacts / "build").glob("*/engine.plan"))
    assert len(engines) == 1 and engines[0].stat().st_size > 2 << 30
    print(
        f"\n{files} data file(s), {weights / 2**30:.2f} GiB: "
        + ", ".join(f"{k} {s:.1f} s / {r / 2**30:.2f} GiB" for k, (s, r) in figures.items())
    )


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_precisions_keep_external_data(tmp_path_factory, monkeypatch, precision):
    """fp16 (AutoCast) and int8 (ModelOpt Q/DQ) on the same shapes at 64 MiB, with the
    inline limit lowered to 16 MiB so every graph goes through the external-data path:
    written with its data beside it, cached as graph plus data, served from the cache."""
    outside = tmp_path_factory.mktemp(f"ext_{precision}")
    model = large_table.write(outside / "model", mib=64, files=8)
    repo = copy_repo(tmp_path_factory.mktemp("repo") / "repo")
    calib = ["calibration.source=random", "calibration.num_samples=8", "calibration.batch_size=2"]
    params(repo, *model_params(model), f"precision={precision}", *calib)
    monkeypatch.setenv("TRT_PIPELINE_ONNX_INLINE_LIMIT", str(16 << 20))
    for name in ("fingerprint", "export", "calibrate"):
        run_stage(repo, name)
    out = repo / "artifacts" / "calibrate"
    first = json.loads((out / "calibration.json").read_text())
    assert first["gate_passed"] is True
    assert (out / "model.onnx").stat().st_size < 1 << 20
    assert folder_bytes(out) > 32 << 20
    (out / "calibration.json").unlink()  # calibrate again: the cache serves graph and data
    run_stage(repo, "calibrate")
    again = json.loads((out / "calibration.json").read_text())
    section = "autocast" if precision == "fp16" else "calibration"
    assert again[section]["cache"]["hit"] is True
    assert again["onnx_sha256"] == first["onnx_sha256"]
