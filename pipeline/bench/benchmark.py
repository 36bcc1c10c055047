"""BenchmarkFromBuild: every configured backend side by side at the same shapes,
timed by one method (pipeline.bench.timing; CUDA events on a GPU), checked against the
fp32 reference outputs, with the conditions it ran under. The shapes, and their
check against the engine's optimization profiles, come from pipeline.bench.bench_shapes."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pipeline.precision import accuracy
from pipeline.bench import cuda_timing, timing
from pipeline.export import export, onnx_model
from pipeline.core import fileio, hashing
from pipeline.machine import gpu_conditions
from pipeline.bench.bench_shapes import Point, choose_feeds, locate, plan
from pipeline.core.errors import PipelineError, first_line
from pipeline.machine.fingerprint import package_version

INPUT_SEED_OFFSET = 7  # benchmark inputs differ from the export's reference inputs


def bench_inputs(model_cfg: Any, specs: list[onnx_model.TensorSpec], shapes: dict, seed: int) -> dict[str, np.ndarray]:
    dims: dict[str, int] = {}
    for spec in specs:
        for axis, d in enumerate(spec.dims):
            if isinstance(d, str) and spec.name in shapes:
                dims[d] = int(shapes[spec.name][axis])
    feeds = export.sample_inputs(model_cfg, specs, dims, np.random.default_rng(seed))
    for name, shape in shapes.items():
        if list(feeds[name].shape) != list(shape):
            raise PipelineError(f"benchmark input '{name}' came out as {list(feeds[name].shape)}, wanted {shape}")
    return feeds


@dataclass
class Backend:
    label: str
    device: str
    infer: Callable[[dict, int], dict]  # (feeds, profile index) -> outputs
    time: Callable[[dict, int, Callable], tuple[dict, dict]]  # -> (times in ms, notes)
    close: Callable[[], None] = lambda: None
    runner: Any = None  # the ONNX Runtime session or the TensorRT runner underneath
    optional: bool = False  # failing to run is a finding (skipped with the reason), not an error


def ort_backend(path: Path, bench_cfg: Any, device: str, graph: str, optional: bool = False) -> Backend:
    import onnxruntime as ort

    providers = ("CPUExecutionProvider",)
    if device == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
        providers = ("CUDAExecutionProvider",) + providers
    session = export.ort_session(path, int(bench_cfg.intra_op_threads), providers)
    names = [o.name for o in session.get_outputs()]
    used = session.get_providers()[0]

    def time(feeds: dict, _profile: int, progress: Callable) -> tuple[dict, dict]:
        run = session.run
        host = timing.measure(lambda: run(names, feeds), bench_cfg.warmup_s, bench_cfg.min_duration_s,
                              bench_cfg.min_iterations, progress)
        return {"host": host}, {}

    return Backend(f"ONNX Runtime {ort.__version__} {used}, {graph}", "cuda" if used.startswith("CUDA") else "cpu",
                   lambda feeds, _p: dict(zip(names, session.run(names, feeds))), time, runner=session,
                   optional=optional)


def _torch(cfg: Any) -> Backend:
    from pipeline.bench import torch_runner

    bc = cfg.benchmark
    runner = torch_runner.TorchRunner(cfg.model, torch_runner.resolve_device(bc.device), int(bc.intra_op_threads),
                                      tf32=cfg.precision.name == "tf32")
    on_gpu = runner.device.type == "cuda"
    notes = {"device_copies": bool(bc.device_copies), "cuda_graph": bool(bc.cuda_graph)} if on_gpu else {}
    return Backend(runner.label(), runner.device.type, lambda feeds, _p: runner.infer(feeds),
                   lambda feeds, _p, progress: (runner.time(feeds, bc, progress, bc.device_copies, bc.cuda_graph),
                                                dict(notes)))


def _tensorrt(engine_path: Path, fingerprint: dict, bench_cfg: Any) -> Backend:
    from pipeline.bench import trt_runner

    runner = trt_runner.EngineRunner(engine_path, fingerprint["trt_flavour"])
    return Backend(runner.label(), "cuda", runner.infer,
                   lambda feeds, profile, progress: runner.time(feeds, profile, bench_cfg, progress), runner.close,
                   runner)


def open_backend(name: str, cfg: Any, paths: dict, fingerprint: dict, device: str) -> Backend | str:
    """The backend, or why it does not run here (a string)."""
    if name == "onnxruntime":
        return ort_backend(paths["export"], cfg.benchmark, device, "exported fp32 graph")
    if name == "onnxruntime_calibrated":
        if hashing.sha256_file(paths["calibrated"]) == hashing.sha256_file(paths["export"]):
            return f"precision {cfg.precision.name} leaves the graph unchanged: it is the onnxruntime row"
        try:  # ORT lacks CPU kernels for some bf16/fp8 graphs: a finding, not a crash
            label = f"{cfg.precision.name} graph TensorRT builds"
            return ort_backend(paths["calibrated"], cfg.benchmark, device, label, optional=True)
        except PipelineError as e:
            return str(e)
    if name == "torch":
        from pipeline.bench import torch_runner

        return torch_runner.why_not(cfg.model) or _torch(cfg)
    from pipeline.engine import backend

    return backend.why_engine_cannot_run(fingerprint) or _tensorrt(paths["engine"], fingerprint, cfg.benchmark)


def progress_bar(label: str):
    from tqdm import tqdm

    bar = tqdm(total=100, desc=f"benchmark {label}", unit="%", leave=False, disable=None)

    def update(fraction: float) -> None:
        bar.n = int(fraction * 100)
        bar.refresh()

    return bar, update


def _summarise(times: dict, batch: int, bench_cfg: Any) -> dict:
    if len(times) > 1:
        return cuda_timing.summarise(times, batch, int(bench_cfg.min_tail_samples))
    return timing.stats(times["host"], batch, int(bench_cfg.min_tail_samples))


def brief(result: dict) -> dict:
    keep = ("median_ms", "mean_ms", "p99_ms", "throughput_per_s", "iterations", "batch", "seq",
            "low_sample_percentiles")
    out = {k: result[k] for k in keep if k in result}
    if "gpu" in result:
        out["gpu_compute_median_ms"] = result["gpu"]["compute_ms"]["median_ms"]
    return out


def _accuracy(backend: Backend, references: list, profiles: list[dict], task: str) -> dict:
    try:
        index = locate({k: list(v.shape) for k, v in references[0][0].items()}, profiles)
    except PipelineError as e:
        return {"status": "skipped", "reason": f"reference inputs do not fit the engine: {e}"}
    got = [backend.infer(inputs, index) for inputs, _ in references]
    return accuracy.compare([outputs for _, outputs in references], got, task)


def measure_backend(name: str, backend: Backend, points: list[Point], feeds: dict, bench_cfg: Any) -> dict[str, dict]:
    out = {}
    for point in points:
        bar, update = progress_bar(f"{name} {point.key}")
        try:
            times, notes = backend.time(feeds[point.key], point.profile_index, update)
        finally:
            bar.close()
        out[point.key] = {**_summarise(times, point.batch, bench_cfg), **notes}
        if point.seq is not None:
            out[point.key]["seq"] = point.seq
    return out


def _run_backend(name: str, backend: Backend, points: list[Point], headline: Point, feeds: dict, references: list,
                 profiles: list[dict], cfg: Any) -> tuple[dict, dict]:
    bc = cfg.benchmark
    measured = measure_backend(name, backend, points, feeds, bc)
    result = {"status": "ok", "label": backend.label, "device": backend.device, "profile": headline.profile,
              **measured[headline.key]}
    if references:
        result["accuracy"] = _accuracy(backend, references, profiles, cfg.model.task)
    if name == "tensorrt" and bc.layer_profile_top:
        result["layers"] = backend.runner.layer_times(feeds[headline.key], headline.profile_index,
                                                      int(bc.layer_profile_iterations), int(bc.layer_profile_top))
    return result, measured


def run(cfg: Any, profiles: list[dict], paths: dict, fingerprint: dict) -> dict:
    """paths: export, calibrated (ONNX files), engine, reference (npz)."""
    bc = cfg.benchmark
    specs = onnx_model.inputs(onnx_model.load(paths["export"], check=False))
    headline, sweep = plan(bc, specs, profiles)
    points = list({p.key: p for p in [headline, *sweep]}.values())
    seed = int(cfg.model.seed) + INPUT_SEED_OFFSET
    reference, pairs = export.reference_info(paths["reference"].parent), export.split_reference(
        fileio.read_npz(paths["reference"], "reference data"))
    references = pairs if bc.accuracy else []
    feeds, from_reference = choose_feeds(points, pairs, reference.get("source") == "folder",
                                         lambda shapes: bench_inputs(cfg.model, specs, shapes, seed))
    device = _device(bc.device, fingerprint)
    pci = _pci_bus_id() if device == "cuda" else None
    gpu_before = gpu_conditions.snapshot(pci)

    results: dict[str, dict] = {}
    by_point: dict[str, dict] = {}
    for name in bc.backends:
        backend = open_backend(name, cfg, paths, fingerprint, device)
        if isinstance(backend, str):
            results[name] = {"status": "skipped", "reason": backend}
            continue
        try:
            results[name], measured = _run_backend(name, backend, points, headline, feeds, references, profiles, cfg)
        except Exception as e:
            if not backend.optional:
                raise
            results[name], measured = {"status": "skipped", "reason": f"{backend.label}: {first_line(e)}"}, {}
        finally:
            backend.close()
        for key, summary in measured.items():
            by_point.setdefault(key, {})[name] = brief(summary)
    _add_speedups(results, by_point, bc.baseline)
    return {
        "profile": headline.profile,
        "shapes": headline.shapes,
        "headline": headline.key,
        "inputs": {"reference": reference, "from_reference_data": from_reference},
        "baseline": bc.baseline,
        "results": results,
        "by_shape": {p.key: by_point.get(p.key, {}) for p in sweep},
        "method": {"warmup_s": bc.warmup_s, "min_duration_s": bc.min_duration_s,
                   "min_iterations": bc.min_iterations, "min_tail_samples": bc.min_tail_samples,
                   "latency": "host wall clock per iteration (perf_counter_ns); GPU stages by CUDA events"},
        "conditions": conditions(bc, fingerprint, gpu_before, gpu_conditions.snapshot(pci)),
    }


def _add_speedups(results: dict, by_point: dict, baseline: str) -> None:
    """Baseline median over each backend's median: above 1 is faster than the baseline."""
    key = f"speedup_vs_{baseline}"
    base = results.get(baseline, {})
    if base.get("status") == "ok":
        for r in results.values():
            if r.get("status") == "ok":
                r[key] = _ratio(base["median_ms"], r["median_ms"])
    for row in by_point.values():
        if baseline in row:
            for r in row.values():
                r[key] = _ratio(row[baseline]["median_ms"], r["median_ms"])


def _ratio(a: float, b: float) -> float:
    return float(f"{a / b:.4g}")


def _device(requested: str, fingerprint: dict) -> str:
    """Where ONNX Runtime runs (and the GPU readings come from): the fingerprint
    already knows whether this machine has a GPU, without importing torch."""
    has_gpu = fingerprint.get("gpu") is not None
    if requested == "cuda" and not has_gpu:
        raise PipelineError("benchmark.device=cuda but this machine has no GPU (see artifacts/fingerprint.json)")
    return "cuda" if has_gpu and requested != "cpu" else "cpu"


def _pci_bus_id() -> str | None:
    try:
        from pipeline.machine.cudart import Cuda

        return Cuda.get().pci_bus_id(0)
    except PipelineError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def conditions(bench_cfg: Any, fingerprint: dict, gpu_before: dict, gpu_after: dict) -> dict:
    governor = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    torch = sys.modules.get("torch")
    return {
        "fingerprint": fingerprint["id"],
        "target": fingerprint.get("target"),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_governor": governor.read_text().strip() if governor.exists() else None,
        "intra_op_threads": int(bench_cfg.intra_op_threads) or "library default",
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "onnxruntime": package_version("onnxruntime") or package_version("onnxruntime-gpu"),
            "torch": package_version("torch"),
            "tensorrt": f"{fingerprint['trt_flavour']} {fingerprint['trt_version']}",
            "nvidia-ml-py": package_version("nvidia-ml-py"),
        },
        "gpu_before": gpu_before,
        "gpu_after": gpu_after,
    }
