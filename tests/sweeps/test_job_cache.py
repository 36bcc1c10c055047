"""Job reuse in sweeps (pipeline/sweeps/job_cache.py): a job identical to a finished one is
restored, never one whose model bytes, code, config or machine differ; a pruned engine
or a damaged saved job makes the job run again, and the stores stay valid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.sweeps import job_cache
from tests.conftest import compose
from tests.helpers import write_model_with_external_data

REPO = Path(__file__).resolve().parents[2]
FAST = [
    "benchmark.warmup_s=0.02",
    "benchmark.min_duration_s=0.05",
    "benchmark.min_iterations=5",
    "inspect.html=false",
    "build.backend=tensorrt_rtx",
]


def key(cfg, fp="fp-a"):
    from pipeline.core import hashing

    return hashing.sha256_json(job_cache.key_inputs(REPO, cfg, fp))


def test_the_key_covers_model_bytes_code_config_and_machine_but_not_where_a_job_runs(tmp_path):
    onnx_path, weights = write_model_with_external_data(tmp_path)
    model = ["model=onnx_file", f"model.onnx_path={onnx_path}", f"model.source={tmp_path}"]
    cfg = compose(*model)
    static, from_config = job_cache.dvc_deps(REPO, cfg)
    deps = static | from_config
    assert str(tmp_path) in deps and "data/calibration" in deps and "pipeline/zoo" in deps
    assert {"pipeline/core", "pipeline/engine", "pipeline/bench", "pipeline/flow/stages.py"} <= set(
        deps
    )
    assert not any(d.startswith(("artifacts", "metrics")) for d in deps)  # made by the job itself

    before = key(cfg)
    assert key(compose(*model, "sweep.accelerator_type=L4", "sweep.reuse=false")) == before
    assert key(compose(*model, "precision=fp16")) != before
    assert key(cfg, fp="fp-b") != before
    data = bytearray(weights.read_bytes())
    data[:4] = np.float32(7.5).tobytes()  # one weight of the external-data file, in place
    weights.write_bytes(bytes(data))
    assert key(cfg) != before


def test_paths_from_the_config_are_hashed_where_the_job_reads_them(tmp_path, monkeypatch):
    """Run from another folder, a job reads `model.source=pipeline/zoo` there (hydra.job.chdir
    is false), not in the repository: its key must not be that of the run from the
    repository, whose outputs it would otherwise restore."""
    # A plain relative path: the bundled default, ${trt_zoo:}, resolves to wherever the
    # package is imported from, which run from elsewhere is this checkout's folder.
    cfg = compose("model=transformer", "model.source=pipeline/zoo")
    inputs = job_cache.key_inputs(REPO, cfg, "fp-a")["deps"]
    assert (
        inputs["config:pipeline/zoo"] == inputs["pipeline/zoo"] is not None
    )  # run from the repository: the same folder
    at_repo = key(cfg)
    monkeypatch.chdir(tmp_path)
    elsewhere = job_cache.key_inputs(REPO, cfg, "fp-a")["deps"]
    assert (
        elsewhere["config:pipeline/zoo"] is None
        and elsewhere["pipeline/zoo"] == inputs["pipeline/zoo"]
    )  # code: the repository's
    assert key(cfg) != at_repo
    (tmp_path / "pipeline" / "zoo").mkdir(parents=True)
    (tmp_path / "pipeline" / "zoo" / "transformer.py").write_text("# another model\n")
    assert job_cache.key_inputs(REPO, cfg, "fp-a")["deps"]["config:pipeline/zoo"] not in (
        None,
        inputs["pipeline/zoo"],
    )


def job(sweep_dir: Path, store: Path, *overrides: str) -> tuple[dict, str]:
    env = {**os.environ, "TRT_PIPELINE_STORE": str(store)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli.run",
            "--multirun",
            f"hydra.sweep.dir={sweep_dir}",
            *overrides,
            *FAST,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    [result] = sweep_dir.rglob("result.json")  # a path value nests the job folder
    return json.loads(result.read_text()), r.stderr


def verify(store: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "cache", "verify", "--store", str(store)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.e2e
def test_an_outside_model_changed_in_place_runs_again_and_a_pruned_or_damaged_job_reruns(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    onnx_path, weights = write_model_with_external_data(outside)
    model = ["model=onnx_file", f"model.onnx_path={onnx_path}", f"model.source={outside}"]
    store = tmp_path / "store"
    first, _ = job(tmp_path / "1", store, *model)
    assert first["store_event"] == "miss, built"
    again, _ = job(tmp_path / "2", store, *model)
    assert again["store_event"] == "job reused" and again["engine_sha256"] == first["engine_sha256"]
    assert again["benchmark"] == first["benchmark"]  # restored, and the result says so

    data = bytearray(weights.read_bytes())
    data[:4] = np.float32(7.5).tobytes()
    weights.write_bytes(bytes(data))
    changed, _ = job(tmp_path / "3", store, *model)
    assert (
        changed["store_event"] == "miss, built"
        and changed["engine_sha256"] != first["engine_sha256"]
    )

    # The engine a saved job names is pruned: the job runs again (and builds it).
    engines = store / "entries"
    rm = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "cache",
            "rm",
            changed["cache_key"],
            "--store",
            str(store),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert rm.returncode == 0, rm.stderr
    assert not (engines / changed["cache_key"]).exists()
    assert "removed 1 saved sweep job(s) whose engine is gone" in rm.stdout, (
        rm.stdout
    )  # it could never be restored
    assert len(list((store / "jobs" / "entries").iterdir())) == 1
    rebuilt, _ = job(tmp_path / "4", store, *model)
    assert rebuilt["store_event"] == "miss, built"

    # A saved job damaged on disk is moved aside, with a warning, and the job runs again.
    [saved] = [
        p
        for p in (store / "jobs" / "entries").iterdir()
        if json.loads((p / "result.json").read_text())["cache_key"] == changed["cache_key"]
    ]
    report = next(p for p in saved.iterdir() if p.name.endswith("report.json"))
    report.write_bytes(report.read_bytes()[:100])  # truncated
    repaired, err = job(tmp_path / "5", store, *model)
    assert repaired["store_event"] == "hit" and "job store entry" in err and "damaged" in err, err
    [restored] = (tmp_path / "5").rglob("artifacts/inspect/report.json")
    assert json.loads(restored.read_text())["engine"]  # written by the job that ran, whole
    verify(store)
    last, _ = job(tmp_path / "6", store, *model)
    assert last["store_event"] == "job reused"
