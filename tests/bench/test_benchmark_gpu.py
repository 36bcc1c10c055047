"""GPU parts of the benchmark: CUDA events, copies and graphs through
pipeline.machine.cudart, NVML readings, PyTorch on CUDA, and the TensorRT engine where one
can run here. Skipped with the reason on machines without a GPU."""

from __future__ import annotations

import importlib.util
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.bench import cuda_timing
from pipeline.bench.runner import TimingJob
from pipeline.machine import gpu_conditions

pytestmark = pytest.mark.gpu
FAST = dict(warmup_s=0.05, min_duration_s=0.2, min_iterations=50, min_tail_samples=10)


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} has no CUDA device")
    return torch


def test_nvml_reads_clocks_temperature_and_power():
    from pipeline.machine.cudart import Cuda

    snap = gpu_conditions.snapshot(Cuda.get().pci_bus_id(0))
    assert snap["gpu"] and snap["clocks_mhz"]["sm"] and snap["temperature_c"] is not None
    assert snap["power_w"] is not None and snap["performance_state"].startswith("P")


def _check_times(times: dict, stages: list[str]) -> None:
    n = len(times["host"])
    assert n >= FAST["min_iterations"] and all(len(times[s]) == n for s in [*stages, "gpu_total"])
    assert np.all(times["compute"] > 0)
    assert np.all(
        times["gpu_total"] <= times["host"] + 0.002
    )  # events lie inside the host clock's window
    assert np.allclose(sum(times[s] for s in stages), times["gpu_total"], atol=0.01)


@pytest.mark.parametrize("copies,graph", [(True, False), (True, True), (False, False)])
def test_torch_on_cuda_through_the_shared_event_path(copies, graph):
    _torch_cuda()
    from pipeline.bench import torch_runner
    from pipeline.zoo import cnn_classifier

    feeds = cnn_classifier.sample_inputs({"batch": 4}, np.random.default_rng(0))
    runner = torch_runner.TorchRunner(
        SimpleNamespace(factory="pipeline.zoo.cnn_classifier", seed=0), "cuda"
    )
    times, notes = runner.time(
        TimingJob(feeds, 0, SimpleNamespace(**FAST, device_copies=copies, cuda_graph=graph))
    )
    assert notes == {"device_copies": copies, "cuda_graph": graph}
    _check_times(times, ["h2d", "compute", "d2h"] if copies else ["compute"])
    expected = torch_runner.TorchRunner(
        SimpleNamespace(factory="pipeline.zoo.cnn_classifier", seed=0), "cpu"
    ).infer(feeds)
    np.testing.assert_allclose(
        runner.last_outputs["logits"], expected["logits"], rtol=1e-3, atol=1e-4
    )
    summary = cuda_timing.summarise(times, 4, 10)
    assert summary["gpu"]["compute_ms"]["median_ms"] <= summary["median_ms"] + 0.002


def test_tensorrt_engine_runs_times_and_matches_the_reference(request, tmp_path):
    from pipeline.engine import backend
    from pipeline.machine.fingerprint import probe_gpu

    gpu, _ = probe_gpu()
    for flavour in ("tensorrt", "tensorrt_rtx"):
        fp = {"gpu": gpu, "trt_flavour": flavour}
        if backend.why_engine_cannot_run(fp) is None and importlib.util.find_spec(flavour):
            break
    else:
        pytest.skip("no TensorRT flavour that runs on this GPU is installed")
    from pipeline.core.layout import Layout
    from pipeline.flow import stages

    cfg, built = request.getfixturevalue("built_cnn")
    shutil.copytree(built.root / "artifacts", tmp_path / "artifacts")
    metrics = stages.benchmark(cfg, Layout(tmp_path))
    r = metrics["results"]["tensorrt"]
    assert r["status"] == "ok", r
    assert set(r["gpu"]) == {"h2d_ms", "compute_ms", "d2h_ms", "gpu_total_ms"}
    assert r["gpu"]["compute_ms"]["median_ms"] <= r["median_ms"]
    assert r["accuracy"]["logits"]["cosine"] > 0.999
    assert r["layers"] and all(x["mean_ms"] >= 0 for x in r["layers"])
    assert metrics["conditions"]["gpu_before"]["gpu"] and metrics["conditions"]["gpu_after"]["gpu"]


def test_gpu_check_script_passes():
    import json
    import subprocess
    import sys
    from pathlib import Path

    _torch_cuda()
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
    r = subprocess.run(
        [sys.executable, str(script), "--seconds", "0.2"], capture_output=True, text=True
    )
    report = json.loads(r.stdout)
    assert r.returncode == 0 and report["failed"] == [], r.stdout + r.stderr
    assert report["cudart"]["roundtrip_through_graph"] is True
    assert set(report["models"]["cnn"]["variants"]) == {
        "copies",
        "copies+cuda_graph",
        "compute_only",
    }
