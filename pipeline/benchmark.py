"""BenchmarkFromBuild: ONNX Runtime measured for real on the CPU; the engine where
a GPU can run it, else an explicit `skipped` with the reason."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pipeline import export, onnx_model, timing, trt_runner
from pipeline.errors import PipelineError


def dims_for_shapes(specs: list[onnx_model.TensorSpec], shapes: dict[str, list[int]]) -> dict[str, int]:
    """Symbolic dim values implied by concrete shapes, for the samplers."""
    dims: dict[str, int] = {}
    for spec in specs:
        for axis, d in enumerate(spec.dims):
            if isinstance(d, str) and spec.name in shapes:
                dims[d] = int(shapes[spec.name][axis])
    return dims


def bench_inputs(model_cfg: Any, onnx_path: Path, shapes: dict[str, list[int]], seed: int) -> dict[str, np.ndarray]:
    specs = onnx_model.inputs(onnx_model.load(onnx_path, check=False))
    feeds = export.sample_inputs(model_cfg, specs, dims_for_shapes(specs, shapes), np.random.default_rng(seed))
    for name, shape in shapes.items():
        if list(feeds[name].shape) != list(shape):
            raise PipelineError(f"benchmark input '{name}' came out as {list(feeds[name].shape)}, wanted {shape}")
    return feeds


def _progress_bar(label: str):
    from tqdm import tqdm

    bar = tqdm(total=100, desc=f"benchmark {label}", unit="%", leave=False, disable=None)

    def update(fraction: float) -> None:
        bar.n = int(fraction * 100)
        bar.refresh()

    return bar, update


def timed(label: str, fn: Callable[[], object], cfg: Any, batch: int) -> dict:
    bar, update = _progress_bar(label)
    try:
        lat = timing.measure(fn, cfg.warmup_s, cfg.min_duration_s, cfg.min_iterations, progress=update)
    finally:
        bar.close()
    return {"status": "ok", **timing.stats(lat, batch)}


def onnxruntime_fn(onnx_path: Path, feeds: dict[str, np.ndarray], threads: int) -> Callable[[], object]:
    session = export.ort_session(onnx_path, threads)
    names = [o.name for o in session.get_outputs()]
    return lambda: session.run(names, feeds)


def conditions(bench_cfg: Any, fingerprint: dict) -> dict:
    import onnxruntime as ort

    return {
        "fingerprint": fingerprint["id"],
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "intra_op_threads": int(bench_cfg.intra_op_threads) or "onnxruntime default",
        "onnxruntime": ort.__version__,
    }


def run(model_cfg: Any, bench_cfg: Any, profile: dict, export_onnx: Path, engine_path: Path,
        fingerprint: dict) -> dict:
    shapes = {name: rng[bench_cfg.shape] for name, rng in profile["inputs"].items()}
    feeds = bench_inputs(model_cfg, export_onnx, shapes, seed=int(model_cfg.seed) + 7)
    batch = int(next(iter(feeds.values())).shape[0]) if feeds else 1
    results: dict[str, Any] = {}
    for name in bench_cfg.backends:
        if name == "onnxruntime":
            results[name] = timed(name, onnxruntime_fn(export_onnx, feeds, int(bench_cfg.intra_op_threads)),
                                  bench_cfg, batch)
        elif name == "tensorrt":
            reason = trt_runner.why_not_runnable(fingerprint)
            if reason:
                results[name] = {"status": "skipped", "reason": reason}
                continue
            infer, close = trt_runner.make_engine_fn(engine_path, fingerprint["trt_flavour"], feeds)
            try:
                results[name] = timed(name, infer, bench_cfg, batch)
            finally:
                close()
        else:
            results[name] = {"status": "skipped", "reason": f"backend '{name}' is not available in this stage"}
    return {"shapes": shapes, "profile": profile["name"], "results": results,
            "conditions": conditions(bench_cfg, fingerprint)}
