"""GPU timing shared by the TensorRT and PyTorch runners, as trtexec reports it.

An iteration enqueues its stages on one stream (host-to-device copies, compute,
device-to-host copies), with a CUDA event before each stage and one after the
last, then waits for that last event. The events give the GPU time of each stage
("compute" is trtexec's GPU Compute Time, all stages together its Latency); the
host clock around the whole iteration gives the latency a caller sees. The host
loop is pipeline.bench.timing.measure, the same one ONNX Runtime is timed with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypedDict

import numpy as np

from pipeline.bench import measure_loop
from pipeline.machine.cudart import Cuda

Stage = tuple[str, Callable[[], None]]


def measure(
    stages: Sequence[Stage],
    stream: int,
    budget: measure_loop.Budget,
    progress: Callable[[float], None] | None = None,
    cuda: Cuda | None = None,
) -> dict[str, np.ndarray]:
    """{"host": ms, <stage>: ms, "gpu_total": ms}, one value per measured iteration."""
    if not stages:
        raise ValueError("nothing to time: no stages")
    cuda = cuda or Cuda.get()
    events = [cuda.event() for _ in range(len(stages) + 1)]
    gpu: dict[str, list[float]] = {name: [] for name, _ in stages}
    total: list[float] = []
    record, last = cuda.record, events[-1]
    pairs = [(events[i], stage) for i, stage in enumerate(stages)]

    def iteration() -> None:
        for event, (_, enqueue) in pairs:
            record(event, stream)
            enqueue()
        record(last, stream)
        cuda.wait_event(last)

    def read_events() -> None:
        # After the synchronize every event of this iteration has completed, so
        # reading them here costs no waiting and they can be re-recorded next time.
        for i, (name, _) in enumerate(stages):
            gpu[name].append(cuda.elapsed_ms(events[i], events[i + 1]))
        total.append(cuda.elapsed_ms(events[0], last))

    try:
        host = measure_loop.measure(iteration, budget, progress=progress, after=read_events)
    finally:
        for event in events:
            cuda.release("cudaEventDestroy", event)
    return {
        "host": host,
        **{k: np.asarray(v) for k, v in gpu.items()},
        "gpu_total": np.asarray(total),
    }


class StageStats(TypedDict):
    """One GPU stage's CUDA-event times (or all stages': gpu_total_ms)."""

    mean_ms: float
    median_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    low_sample_percentiles: list[str]


class TimingSummary(measure_loop.LatencyStats, total=False):
    """A backend's times at one point: the host's stats, comparable across backends."""

    gpu: dict[str, StageStats]  # "<stage>_ms" -> its times; a GPU's runs only
    cut_short: str  # why the budget stopped it short of benchmark.min_iterations


def summarise(times: dict[str, np.ndarray], batch: int, min_tail_samples: int) -> TimingSummary:
    """Host latency stats at the top level (comparable with CPU backends), GPU
    stats per stage under "gpu"."""
    return {
        **measure_loop.stats(times["host"], batch, min_tail_samples),
        "gpu": {
            f"{name}_ms": _brief(measure_loop.stats(v, batch, min_tail_samples))
            for name, v in times.items()
            if name != "host"
        },
    }


def _brief(s: measure_loop.LatencyStats) -> StageStats:
    return {
        "mean_ms": s["mean_ms"],
        "median_ms": s["median_ms"],
        "p90_ms": s["p90_ms"],
        "p95_ms": s["p95_ms"],
        "p99_ms": s["p99_ms"],
        "min_ms": s["min_ms"],
        "max_ms": s["max_ms"],
        "std_ms": s["std_ms"],
        "low_sample_percentiles": s["low_sample_percentiles"],
    }
