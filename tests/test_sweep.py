"""Hydra multirun with the joblib launcher, job folders named by overrides, run.log,
and the sweep summary (callback and `python -m pipeline sweep-report`)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import sweep
from pipeline.core.errors import PipelineError

REPO = Path(__file__).resolve().parents[1]
FAST = ["benchmark.warmup_s=0.02", "benchmark.min_duration_s=0.05", "benchmark.min_iterations=5"]


def multirun(sweep_dir: Path, *overrides: str, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRT_PIPELINE_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "pipeline.run", "--multirun", "hydra/launcher=joblib",
                           "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep_dir}", "build.backend=tensorrt_rtx",
                           *overrides, *FAST], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.e2e
def test_joblib_sweep_names_folders_logs_and_summarises_and_a_rerun_builds_nothing(tmp_path):
    store = tmp_path / "store"
    first = multirun(tmp_path / "a", "model=cnn", "precision=fp32,fp16", store=store)
    assert first.returncode == 0, first.stderr[-3000:]
    jobs = sorted(p.name for p in (tmp_path / "a").iterdir() if p.is_dir())
    assert jobs == ["build.backend=tensorrt_rtx,model=cnn,precision=fp16",
                    "build.backend=tensorrt_rtx,model=cnn,precision=fp32"], jobs
    for job in jobs:
        log = (tmp_path / "a" / job / "run.log").read_text()
        assert "build: engine store miss, built" in log and "benchmark: median" in log, log
        assert json.loads((tmp_path / "a" / job / "result.json").read_text())["store_event"] == "miss, built"
    rows = list(csv.DictReader((tmp_path / "a" / "sweep_summary.csv").open()))
    assert {r["precision"] for r in rows} == {"fp32", "fp16"} and {r["store"] for r in rows} == {"built"}
    assert all(r["gates"] == "passed" and float(r["median_ms"]) > 0 and r["acc:cosine"] for r in rows)
    assert (tmp_path / "a" / "sweep_pareto.svg").read_text().lstrip().startswith("<?xml")
    assert (tmp_path / "a" / "sweep_pareto.png").stat().st_size > 1000

    again = multirun(tmp_path / "b", "model=cnn", "precision=fp32,fp16", store=store)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "b" / "sweep_summary.csv").open()))
    assert {r["store"] for r in rows} == {"reused"}, rows  # pipeline/job_cache.py: nothing ran again
    for job in jobs:
        a, b = tmp_path / "a" / job, tmp_path / "b" / job
        assert "job reused: every input matches a finished job" in (b / "run.log").read_text()
        assert "build:" not in (b / "run.log").read_text()
        for rel in ("artifacts/export/model.onnx", "metrics/benchmark.json", "artifacts/inspect/report.md"):
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
        [engine_a] = a.glob("artifacts/build/*/engine.plan")
        assert engine_a.read_bytes() == (b / engine_a.relative_to(a)).read_bytes()

    measured = multirun(tmp_path / "c", "model=cnn", "precision=fp32,fp16", "sweep.reuse=false", store=store)
    assert measured.returncode == 0, measured.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "c" / "sweep_summary.csv").open()))
    assert {r["store"] for r in rows} == {"hit"}, rows  # measured again, the engines from the store

    cli = subprocess.run([sys.executable, "-m", "pipeline", "sweep-report", str(tmp_path / "b"), "--out",
                          str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert (tmp_path / "out" / "sweep_summary.csv").read_text() == (tmp_path / "b" / "sweep_summary.csv").read_text()


def test_sweep_report_on_a_folder_without_jobs_is_one_line(tmp_path):
    cli = subprocess.run([sys.executable, "-m", "pipeline", "sweep-report", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True)
    assert cli.returncode == 1 and cli.stderr.count("\n") == 1 and "no jobs" in cli.stderr, cli.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_job_folder_without_result_is_a_failed_row(tmp_path):
    (tmp_path / "precision=int8" / ".hydra").mkdir(parents=True)
    rows = sweep.collect(tmp_path)
    assert rows == [{"job": "precision=int8", "gates": "job failed (no result.json)"}]
    with pytest.raises(PipelineError, match="not a folder"):
        sweep.collect(tmp_path / "missing")


def _row(job, median, cosine, mib=1.0):
    return {"job": job, "median_ms": median, "acc:cosine": cosine, "engine_mib": mib, "precision": job,
            "latency_backend": "onnxruntime"}


def test_pareto_keeps_only_jobs_nothing_beats_on_both_axes():
    rows = [_row("fp32", 3.0, 1.0), _row("fp16", 2.0, 0.999), _row("int8", 1.0, 0.99), _row("bad", 2.5, 0.98)]
    assert [r["job"] for r in sweep.pareto(rows)] == ["int8", "fp16", "fp32"]
    rows = [{**r, "acc:max_abs_error": 1 - r.pop("acc:cosine")} for r in rows]
    assert [r["job"] for r in sweep.pareto(rows)] == ["int8", "fp16", "fp32"]


@pytest.mark.parametrize("launcher", ["joblib", "submitit_slurm", "trt_ray"])
def test_every_sweep_launcher_composes_with_our_config(launcher):
    r = subprocess.run([sys.executable, "-m", "pipeline.run", "--cfg", "hydra", "--package", "hydra.launcher",
                        f"hydra/launcher={launcher}"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0 and "_target_" in r.stdout, r.stderr
