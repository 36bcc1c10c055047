"""ONNX Runtime behind the runner contract: the exported graph (the baseline) or the
precision-transformed one, on the CUDA provider where the benchmark runs on a GPU
and ONNX Runtime has it, else on the CPU. Timed by the host loop alone
(pipeline.bench.timing): ONNX Runtime's run() returns host arrays, so there are no
stages for CUDA events to tell apart."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.bench import measure_loop
from pipeline.bench.runner import Feeds, Notes, Runner, TimingJob
from pipeline.graph import onnx_runtime

if TYPE_CHECKING:
    from pipeline.core.config import BenchmarkConfig


class OrtRunner(Runner):
    def __init__(self, path: Path, bench_cfg: BenchmarkConfig, device: str, graph: str) -> None:
        import onnxruntime as ort

        providers: tuple[str, ...] = ("CPUExecutionProvider",)
        if device == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers = ("CUDAExecutionProvider", *providers)
        self.session = onnx_runtime.ort_session(path, int(bench_cfg.intra_op_threads), providers)
        self.output_names = [o.name for o in self.session.get_outputs()]
        used = self.session.get_providers()[0]
        self.label = f"ONNX Runtime {ort.__version__} {used}, {graph}"
        self.device = "cuda" if used.startswith("CUDA") else "cpu"

    def infer(self, feeds: Feeds, profile_index: int = 0) -> dict[str, np.ndarray]:
        return dict(zip(self.output_names, self.session.run(self.output_names, feeds)))

    def time(self, job: TimingJob) -> tuple[dict[str, np.ndarray], Notes]:
        run, names, feeds = self.session.run, self.output_names, job.feeds
        host = measure_loop.measure(
            lambda: run(names, feeds), measure_loop.Budget.of(job.settings), job.progress
        )
        return {"host": host}, {}
