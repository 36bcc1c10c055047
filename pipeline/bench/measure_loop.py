"""The measuring loop, trtexec style: warm up for a time, then run until both a
minimum duration and a minimum iteration count are reached, within a time budget
(max_duration_s: a model that takes seconds per call stops there with what it has, and
says so); report percentiles with the number of samples behind them. The GPU path
(pipeline/bench/cuda_timing.py) drives this same loop."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypedDict

import numpy as np

PERCENTILES = (("p90", 90), ("p95", 95), ("p99", 99))
# Fewer samples than this beyond a percentile and its value is mostly one or two
# outliers; the percentile is reported but flagged.
MIN_TAIL_SAMPLES = 10
PROGRESS_EVERY_NS = 100_000_000


class BudgetSettings(Protocol):
    """What a time budget is made of: the benchmark group (config.BenchmarkConfig), or a
    stand-in with these four settings."""

    @property
    def warmup_s(self) -> float: ...
    @property
    def min_duration_s(self) -> float: ...
    @property
    def min_iterations(self) -> int: ...
    @property
    def max_duration_s(self) -> float: ...


@dataclass(frozen=True)
class Budget:
    warmup_s: float
    min_duration_s: float
    min_iterations: int
    max_duration_s: float = 0.0  # 0: no limit; else stop here, even short of min_iterations

    @classmethod
    def of(cls, bench_cfg: BudgetSettings) -> Budget:
        return cls(
            float(bench_cfg.warmup_s),
            float(bench_cfg.min_duration_s),
            int(bench_cfg.min_iterations),
            float(bench_cfg.max_duration_s or 0.0),
        )

    def cut_short(self, iterations: int) -> bool:
        """Whether a run of `iterations` stopped at the budget, short of min_iterations."""
        return iterations < self.min_iterations


def measure(
    fn: Callable[[], object],
    budget: Budget,
    progress: Callable[[float], None] | None = None,
    after: Callable[[], None] | None = None,
) -> np.ndarray:
    """Per-iteration latencies in milliseconds.

    An iteration is one call and one clock read (the previous read is its start),
    so the loop adds next to nothing to what it measures. `after` (reading CUDA
    events) and the progress bar run between iterations and are kept out of the
    samples by reading the clock again after them. The garbage collector is off
    while measuring, as in timeit: a collection is the harness's noise, not the
    model's."""
    clock = time.perf_counter_ns
    min_iterations = budget.min_iterations
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        end = clock() + int(budget.warmup_s * 1e9)
        if budget.warmup_s > 0:
            fn()  # at least once: lazy initialisation belongs to warm-up, whatever its length
        while clock() < end:
            fn()
        samples: list[int] = []
        append = samples.append
        start = last = clock()
        deadline = start + int(budget.min_duration_s * 1e9)
        # One iteration at least, however slow; then the budget ends the run.
        stop = start + int(budget.max_duration_s * 1e9) if budget.max_duration_s > 0 else 0
        next_tick = start + PROGRESS_EVERY_NS
        while (last < deadline or len(samples) < min_iterations) and not (
            stop and samples and last >= stop
        ):
            fn()
            now = clock()
            append(now - last)
            if after is None and (progress is None or now < next_tick):
                last = now
                continue
            if after is not None:
                after()
            if progress is not None and now >= next_tick:
                progress(fraction_done(now - start, deadline - start, len(samples), min_iterations))
                next_tick = now + PROGRESS_EVERY_NS
            last = clock()
    finally:
        if gc_was_on:
            gc.enable()
    return np.asarray(samples, dtype=np.float64) / 1e6


def fraction_done(elapsed_ns: int, duration_ns: int, iterations: int, min_iterations: int) -> float:
    """How far the loop is, 0 to 1. It stops only when both the duration and the
    iteration count are reached, so it is as far as the one further from its goal."""
    by_time = elapsed_ns / duration_ns if duration_ns > 0 else 1.0
    by_count = iterations / min_iterations if min_iterations > 0 else 1.0
    return max(0.0, min(1.0, by_time, by_count))


class LatencyStats(TypedDict):
    """A run's latencies summed up (stats): milliseconds, and samples per second at its batch."""

    iterations: int
    seconds: float  # all iterations together
    mean_ms: float
    median_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    throughput_per_s: float
    batch: int
    p90_ms: float
    p90_tail_samples: int  # samples beyond p90: with few, it is one or two outliers
    p95_ms: float
    p95_tail_samples: int
    p99_ms: float
    p99_tail_samples: int
    low_sample_percentiles: list[str]  # those with fewer than min_tail_samples beyond them


def _ns(ms: float) -> float:
    """A figure in ms to the nanosecond (6 places), as benchmark.json keeps it."""
    return round(ms, 6)


def stats(
    latencies_ms: np.ndarray, batch: int, min_tail_samples: int = MIN_TAIL_SAMPLES
) -> LatencyStats:
    """mean, median, p90/p95/p99, min, max, std and throughput (samples/s at this
    batch), with the number of samples beyond each percentile and the percentiles
    that rest on too few of them."""
    lat = np.asarray(latencies_ms, dtype=np.float64)
    n = int(lat.size)
    if n == 0:
        raise ValueError("no latencies to summarise")
    total_s = float(lat.sum()) / 1e3
    at = {name: float(np.percentile(lat, q)) for name, q in PERCENTILES}
    tail = {name: int(np.floor(n * (100 - q) / 100 + 1e-9)) for name, q in PERCENTILES}
    return {
        "iterations": n,
        "seconds": _ns(total_s),
        "mean_ms": _ns(float(lat.mean())),
        "median_ms": _ns(float(np.median(lat))),
        "min_ms": _ns(float(lat.min())),
        "max_ms": _ns(float(lat.max())),
        "std_ms": _ns(float(lat.std(ddof=1)) if n > 1 else 0.0),
        "throughput_per_s": _ns(float(n * batch / total_s) if total_s > 0 else 0.0),
        "batch": batch,
        "p90_ms": _ns(at["p90"]),
        "p90_tail_samples": tail["p90"],
        "p95_ms": _ns(at["p95"]),
        "p95_tail_samples": tail["p95"],
        "p99_ms": _ns(at["p99"]),
        "p99_tail_samples": tail["p99"],
        "low_sample_percentiles": [p for p, _ in PERCENTILES if tail[p] < min_tail_samples],
    }


def min_iterations_for(percentile: float, min_tail_samples: int = MIN_TAIL_SAMPLES) -> int:
    """Iterations needed before a percentile stops being flagged."""
    return int(np.ceil(min_tail_samples * 100 / (100 - percentile)))
