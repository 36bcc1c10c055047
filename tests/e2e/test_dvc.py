"""The README's main job for real: dvc repro in a fresh git repository."""

import json
import subprocess
import sys

import pytest

from pipeline.records import calibration_file, inspect_file, summary_file
from tests.helpers import DVC_FAST as FAST
from tests.helpers import dvc, ran_stages

pytestmark = pytest.mark.e2e


def test_dvc_repro_builds_everything_then_is_a_no_op(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    first = dvc(repo, "repro")
    # A clean repro warns of nothing (an empty file as a dep once warned 15 times per run).
    assert "WARNING" not in first.stdout + first.stderr, first.stdout + first.stderr
    assert ran_stages(first.stdout) == [
        "fingerprint",
        "export",
        "calibrate",
        "build",
        "inspect",
        "benchmark",
        "package",
    ]
    config = (repo / "repository/cnn/config.pbtxt").read_text()
    assert 'name: "cnn"' in config and "cc_model_filenames" in config
    fp = json.loads((repo / "artifacts/fingerprint.json").read_text())
    engine_dir = repo / "artifacts/build" / fp["id"]
    manifest = json.loads((engine_dir / "manifest.json").read_text())
    assert (engine_dir / "engine.plan").stat().st_size == manifest["engine"]["bytes"]
    assert manifest["backend"]["flavour"] == fp["trt_flavour"]
    assert (repo / "artifacts/export/model.onnx").exists()
    # Each record passes its one checked reader: the required fields are real ones.
    report = inspect_file.read(repo / "artifacts/inspect")
    assert calibration_file.read(repo / "artifacts/calibrate/calibration.json")["gate_passed"]
    assert summary_file.read(repo / "metrics")["engine_mib"] > 0
    assert report["model"]["exported"]["ops"]["Conv"] == 4
    metrics = json.loads((repo / "metrics/benchmark.json").read_text())
    ort = metrics["results"]["onnxruntime"]
    assert ort["status"] == "ok" and ort["iterations"] >= 100 and ort["median_ms"] > 0
    if fp["gpu"] is None:
        assert metrics["results"]["tensorrt"]["status"] == "skipped"
        assert "GPU" in metrics["results"]["tensorrt"]["reason"]

    again = dvc(repo, "repro")
    assert "WARNING" not in again.stdout + again.stderr, again.stdout + again.stderr
    # Only the machine probe runs; nothing it feeds is reproduced.
    assert ran_stages(again.stdout) == ["fingerprint"]
    assert "didn't change, skipping" in again.stdout
    assert "modified" not in dvc(repo, "status").stdout.replace("always changed", "")


def test_benchmark_params_rerun_only_benchmark_and_fp16_exp(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    dvc(repo, "repro")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "repro"],
        cwd=repo,
        check=True,
    )
    bench = dvc(repo, "exp", "run", *FAST)
    assert ran_stages(bench.stdout) == ["fingerprint", "benchmark"]

    fp16 = dvc(repo, "exp", "run", "-S", "precision=fp16", *FAST)
    assert ran_stages(fp16.stdout) == [
        "fingerprint",
        "calibrate",
        "build",
        "inspect",
        "benchmark",
        "package",
    ]
    calib = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    assert calib["precision"] == "fp16" and calib["ops"].get("Cast", 0) > 0
    fp = json.loads((repo / "artifacts/fingerprint.json").read_text())
    manifest = json.loads((repo / "artifacts/build" / fp["id"] / "manifest.json").read_text())
    assert manifest["config"]["precision"]["name"] == "fp16"
    report = json.loads((repo / "artifacts/inspect/report.json").read_text())
    assert "half" in report["network"]["output_dtypes"]


def test_hydra_multirun_leaves_one_result_per_job(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli.run",
            "--multirun",
            "precision=fp32,fp16",
            "benchmark.min_duration_s=0.2",
            "benchmark.min_iterations=10",
            "hydra.sweep.dir=sweep",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    # job folders are named by their overrides (issue 13), not 0, 1, ...
    jobs = sorted((repo / "sweep").glob("*/result.json"))
    assert [p.parent.name for p in jobs] == ["precision=fp16", "precision=fp32"]
    results = [json.loads(p.read_text()) for p in reversed(jobs)]
    assert [x["precision"] for x in results] == ["fp32", "fp16"]
    assert results[0]["engine_sha256"] != results[1]["engine_sha256"]


def test_a_failed_run_leaves_nothing_that_looks_current_and_exp_run_exits_1(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    dvc(repo, "repro")
    later = ["metrics/summary.json", "metrics/benchmark.json", "metrics/gates.json"]
    assert all((repo / p).is_file() for p in later) and (repo / "artifacts/inspect").is_dir()
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-qm", "ran"], cwd=repo, check=True, capture_output=True)
    gate = "precision.gate.max_abs_error=0"  # int8 cannot be bit-exact: calibrate fails
    failed = subprocess.run(
        [sys.executable, "-m", "pipeline", "exp", "run", "-S", "precision=int8", "-S", gate],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert "accuracy gate failed for int8 ONNX" in failed.stderr
    # the experiment ran in the workspace: the failed gate's metrics are there, pass or fail,
    # and nothing of the earlier fp32 run after calibrate is left to read as this run's
    accuracy = json.loads((repo / "metrics/accuracy.json").read_text())
    assert accuracy["precision"] == "int8" and not accuracy["gate_passed"]
    assert not any((repo / p).exists() for p in later), later
    assert not (repo / "artifacts/inspect").exists()
    status = subprocess.run(
        [sys.executable, "-m", "pipeline", "status"], cwd=repo, capture_output=True, text=True
    )
    assert status.returncode == 1 and "calibrate" in status.stdout + status.stderr
