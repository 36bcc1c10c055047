"""One contract for every backend the benchmark runs (ONNX Runtime, PyTorch,
TensorRT), in the spirit of Polygraphy's BaseRunner: a runner is ready to run once
constructed (activate), `infer` gives outputs, `time` measures, `close` releases
(deactivate). The benchmark drives every backend through these five members alone,
so a new backend needs no glue in pipeline/bench/benchmark.py."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pipeline.bench.measure_loop import BudgetSettings

Feeds = dict[str, np.ndarray]
Progress = Callable[[float], None]
Notes = dict[str, bool | str]  # how a backend was timed (copies, CUDA graph), for benchmark.json
LayerRow = dict[str, str | float]  # {"layer": name, "mean_ms": ..., "percent": ...}


class TimingSettings(BudgetSettings, Protocol):
    """What `Runner.time` reads of the benchmark group (config.BenchmarkConfig): the time
    budget, and on a GPU whether copies are timed and the compute replayed from a CUDA graph."""

    @property
    def device_copies(self) -> bool: ...
    @property
    def cuda_graph(self) -> bool: ...


@dataclass(frozen=True)
class TimingJob:
    """One timed shape: its inputs, the optimization profile they fit, the loop's budget and
    GPU settings, and the bar the loop advances (a share of the shape's budget)."""

    feeds: Feeds
    profile_index: int
    settings: TimingSettings
    progress: Progress | None = None


class Runner(ABC):
    label: str  # what ran, with its version, for the results table
    device: str  # "cpu" or "cuda"

    @abstractmethod
    def infer(self, feeds: Feeds, profile_index: int) -> dict[str, np.ndarray]:
        """Outputs by name for one set of inputs; profile_index picks the engine's
        optimization profile where the backend has profiles."""

    @abstractmethod
    def time(self, job: TimingJob) -> tuple[dict[str, np.ndarray], Notes]:
        """(times, notes): {"host": ms per iteration} plus, on a GPU, each stage's
        CUDA-event ms (pipeline.bench.cuda_timing); notes say how it was run
        (copies, CUDA graph) and land beside the stats in benchmark.json."""

    def layer_times(
        self, feeds: Feeds, profile_index: int, iterations: int, top: int
    ) -> list[LayerRow] | None:
        """Per-layer times where the backend has a profiler; None where it has none."""
        return None

    def close(self) -> None:  # noqa: B027  (optional: most runners hold nothing to release)
        """Release what the runner holds; safe to call more than once."""

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
