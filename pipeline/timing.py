"""The measuring loop, trtexec style: warm up for a time, then run until both a
minimum duration and a minimum iteration count are reached; report percentiles
with the number of samples behind them."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

# Fewer samples than this behind a percentile and its tail is mostly noise.
MIN_SAMPLES_FOR = {"p90": 10, "p95": 20, "p99": 100}


def measure(fn: Callable[[], object], warmup_s: float, min_duration_s: float, min_iterations: int,
            progress: Callable[[float], None] | None = None) -> np.ndarray:
    """Per-iteration latencies in milliseconds. The loop body is one call and one
    clock read, so the harness adds next to nothing to what it measures."""
    clock = time.perf_counter_ns
    end = clock() + int(warmup_s * 1e9)
    while clock() < end:
        fn()
    samples: list[int] = []
    append = samples.append
    start = last = clock()
    deadline = start + int(min_duration_s * 1e9)
    next_tick = start
    while last < deadline or len(samples) < min_iterations:
        fn()
        now = clock()
        append(now - last)
        last = now
        if progress is not None and now >= next_tick:
            progress(min(1.0, max((now - start) / max(deadline - start, 1), len(samples) / max(min_iterations, 1))))
            next_tick = now + 100_000_000
    return np.asarray(samples, dtype=np.float64) / 1e6


def stats(latencies_ms: np.ndarray, batch: int) -> dict:
    n = int(latencies_ms.size)
    total_s = float(latencies_ms.sum()) / 1e3
    out = {
        "iterations": n,
        "seconds": round(total_s, 4),
        "mean_ms": float(latencies_ms.mean()),
        "median_ms": float(np.median(latencies_ms)),
        "min_ms": float(latencies_ms.min()),
        "max_ms": float(latencies_ms.max()),
        "std_ms": float(latencies_ms.std(ddof=1)) if n > 1 else 0.0,
        "throughput_per_s": float(n * batch / total_s) if total_s > 0 else 0.0,
        "batch": batch,
        "low_sample_percentiles": [],
    }
    for name, q in (("p90", 90), ("p95", 95), ("p99", 99)):
        out[f"{name}_ms"] = float(np.percentile(latencies_ms, q))
        # samples strictly beyond the percentile: how many runs the tail value rests on
        out[f"{name}_tail_samples"] = int(round(n * (100 - q) / 100))
        if n < MIN_SAMPLES_FOR[name]:
            out["low_sample_percentiles"].append(name)
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}
