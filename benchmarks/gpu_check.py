"""Exercise the GPU timing path on a machine with an NVIDIA GPU and a CUDA build of
torch, no TensorRT needed: pipeline.machine.cudart over cuda-python's cuda.bindings
(copies, pinned memory, graph capture),
pipeline.bench.cuda_timing (CUDA events around each stage, the code the TensorRT runner
uses), pipeline.bench.torch_runner on CUDA, and pipeline.machine.gpu_conditions (NVML before and
after). Prints one JSON document; exits 1 if an invariant fails.

    python benchmarks/gpu_check.py [--seconds 1.0] [--models cnn,transformer]

Needs only torch, numpy, nvidia-ml-py, cuda-bindings and this repository."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.bench import cuda_timing
from pipeline.bench.runner import TimingJob
from pipeline.machine import gpu_conditions
from pipeline.machine.cudart import D2D, D2H, H2D, Cuda
from pipeline.precision.gate import accuracy

MODELS = {
    "cnn": ("pipeline.zoo.cnn_classifier", {"batch": 8}),
    "transformer": ("pipeline.zoo.transformer_encoder", {"batch": 8, "seq": 32}),
}
# Event timestamps have about half a microsecond of resolution.
EVENT_SLACK_MS = 0.002


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def __call__(self, ok: bool, what: str) -> bool:
        if not ok:
            self.failed.append(what)
        return bool(ok)


def cudart_roundtrip(cuda: Cuda, check: Checks) -> dict:
    """H2D, D2D inside a captured CUDA graph, D2H: the calls the TensorRT runner makes."""
    data = np.arange(1 << 16, dtype=np.float32)
    n = data.nbytes
    stream, dev_a, dev_b = cuda.stream(), cuda.malloc(n), cuda.malloc(n)
    pinned, host = cuda.pinned_array(data.shape, data.dtype)
    graph = graph_exec = 0
    try:
        host[:] = data
        cuda.memcpy_async(dev_a, pinned, n, H2D, stream)
        graph, graph_exec = cuda.capture(
            stream, lambda: cuda.memcpy_async(dev_b, dev_a, n, D2D, stream)
        )
        host[:] = 0
        cuda.launch(graph_exec, stream)
        cuda.memcpy_async(pinned, dev_b, n, D2H, stream)
        cuda.sync(stream)
        same = bool(np.array_equal(host, data))
    finally:
        for call, handle in (
            ("cudaGraphExecDestroy", graph_exec),
            ("cudaGraphDestroy", graph),
            ("cudaFreeHost", pinned),
            ("cudaFree", dev_b),
            ("cudaFree", dev_a),
            ("cudaStreamDestroy", stream),
        ):
            cuda.release(call, handle)
    check(same, "cudart: H2D -> captured D2D graph -> D2H did not return the data")
    return {
        "cuda_bindings": cuda.version,
        "runtime": cuda.runtime_version(),
        "roundtrip_through_graph": same,
    }


def timing_invariants(name: str, times: dict, min_iterations: int, check: Checks) -> None:
    n = len(times["host"])
    check(all(len(v) == n for v in times.values()), f"{name}: stages have different sample counts")
    check(n >= min_iterations, f"{name}: {n} iterations < {min_iterations}")
    check(bool(np.all(times["compute"] > 0)), f"{name}: a GPU compute time is not positive")
    # Events are recorded after the host clock starts and waited for before it stops.
    check(
        bool(np.all(times["gpu_total"] <= times["host"] + EVENT_SLACK_MS)),
        f"{name}: GPU time exceeds the host latency of the same iteration",
    )
    stages = sum(v for k, v in times.items() if k not in ("host", "gpu_total"))
    check(
        bool(np.allclose(stages, times["gpu_total"], atol=EVENT_SLACK_MS * 4)),
        f"{name}: stage times do not add up to the GPU total",
    )


def check_model(key: str, seconds: float, check: Checks) -> dict:
    from pipeline.bench import torch_runner

    factory, dims = MODELS[key]
    model_cfg = SimpleNamespace(factory=factory, seed=0)
    bench: dict[str, Any] = dict(
        warmup_s=0.2, min_duration_s=seconds, min_iterations=100, max_duration_s=0.0
    )
    module = __import__(factory, fromlist=["sample_inputs"])
    feeds = module.sample_inputs(dims, np.random.default_rng(7))
    runner = torch_runner.TorchRunner(model_cfg, "cuda")
    cpu = torch_runner.TorchRunner(model_cfg, "cpu").infer(feeds)
    gpu = runner.infer(feeds)
    figures = accuracy.compare([cpu], [gpu], task="classification")
    check(
        all(f["cosine"] > 0.9999 for f in figures.values()),
        f"{key}: CUDA outputs differ from the CPU's",
    )
    out: dict[str, Any] = {
        "label": runner.label,
        "inputs": {k: list(v.shape) for k, v in feeds.items()},
        "accuracy_vs_cpu": figures,
        "variants": {},
    }
    for variant, copies, graph in (
        ("copies", True, False),
        ("copies+cuda_graph", True, True),
        ("compute_only", False, False),
    ):
        times, notes = runner.time(
            TimingJob(feeds, 0, SimpleNamespace(**bench, device_copies=copies, cuda_graph=graph))
        )
        check(
            notes == {"device_copies": copies, "cuda_graph": graph},
            f"{key}/{variant}: notes {notes}",
        )
        timing_invariants(f"{key}/{variant}", times, bench["min_iterations"], check)
        same = all(np.allclose(runner.last_outputs[k], gpu[k], rtol=1e-4, atol=1e-5) for k in gpu)
        check(same, f"{key}/{variant}: outputs copied in the timed loop differ from infer()")
        summary = cuda_timing.summarise(times, dims["batch"], 10)
        out["variants"][variant] = {
            "iterations": summary["iterations"],
            "host_median_ms": summary["median_ms"],
            "host_p99_ms": summary["p99_ms"],
            "throughput_per_s": summary["throughput_per_s"],
            "gpu_median_ms": {k: v["median_ms"] for k, v in summary["gpu"].items()},
            "outputs_match": same,
        }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=1.0, help="minimum timed duration per variant")
    p.add_argument("--models", default="cnn,transformer")
    args = p.parse_args()
    import torch

    check = Checks()
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA GPU", "torch": torch.__version__}))
        return 1
    cuda = Cuda.get()
    pci = cuda.pci_bus_id(0)
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "pci_bus_id": pci,
        "nvml_before": gpu_conditions.snapshot(pci),
    }
    check(
        report["nvml_before"].get("gpu") is not None,
        f"NVML gave no reading: {report['nvml_before']}",
    )
    report["cudart"] = cudart_roundtrip(cuda, check)
    report["models"] = {m: check_model(m, args.seconds, check) for m in args.models.split(",")}
    report["nvml_after"] = gpu_conditions.snapshot(pci)
    report["nvml_summary"] = gpu_conditions.summary(report["nvml_before"], report["nvml_after"])
    report["failed"] = check.failed
    print(json.dumps(report, indent=2, default=str))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
