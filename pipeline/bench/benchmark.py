"""Every configured backend side by side at the same shapes,
timed by one method (pipeline.bench.timing; CUDA events on a GPU), checked against the
fp32 reference outputs, with the conditions it ran under (pipeline.bench.conditions).
The shapes, and their check against the engine's optimization profiles, come from
pipeline.bench.bench_shapes; every backend is a pipeline.bench.runner.Runner, driven the
same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.bench import bench_sizes, decoder_bench, generation
from pipeline.bench.bench_shapes import choose_feeds, plan
from pipeline.bench.conditions import conditions
from pipeline.bench.measuring import Measuring
from pipeline.bench.ort_runner import OrtRunner
from pipeline.bench.runner import Runner
from pipeline.core import hashing
from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model
from pipeline.inputs import decoder_runs, reference_file, sample_data, samples
from pipeline.inputs.profiles import Profile
from pipeline.machine import gpu_conditions, gpu_memory
from pipeline.records import export_file, fingerprint_file
from pipeline.records.benchmark_file import BenchmarkRecord, TimingMethod
from pipeline.records.fingerprint_file import FingerprintRecord

if TYPE_CHECKING:
    from pipeline.core.config import BenchmarkConfig, ModelConfig, PipelineConfig

INPUT_SEED_OFFSET = 7  # benchmark inputs differ from the export's reference inputs


def bench_inputs(
    model_cfg: ModelConfig,
    specs: list[onnx_model.TensorSpec],
    shapes: Mapping[str, Sequence[int]],
    seed: int,
    vocabulary: int | None = None,
) -> dict[str, np.ndarray]:
    """Random inputs of the given shapes; a decoder's token ids below its `vocabulary`
    (model.int_high is 100 by default, more than a small model's vocabulary), unless
    model.input_ranges says otherwise."""
    feeds = sample_data.sample_inputs(model_cfg, specs, shapes, np.random.default_rng(seed))
    if vocabulary and "input_ids" in feeds and "input_ids" not in model_cfg.input_ranges:
        feeds["input_ids"] = feeds["input_ids"] % vocabulary
    for name, shape in shapes.items():
        if list(feeds[name].shape) != list(shape):
            raise PipelineError(
                f"benchmark input '{name}' came out as {list(feeds[name].shape)}, wanted {shape}"
            )
    return feeds


def open_backend(
    name: str,
    cfg: PipelineConfig,
    paths: dict[str, Path],
    fingerprint: FingerprintRecord,
    device: str,
) -> Runner | str:
    """The backend's runner, or why it does not run here (a string)."""
    bc = cfg.benchmark
    if name == "onnxruntime":
        return OrtRunner(paths["export"], bc, device, "exported fp32 graph")
    if name == "onnxruntime_calibrated":
        if hashing.sha256_file(paths["calibrated"]) == hashing.sha256_file(paths["export"]):
            return f"precision {cfg.precision.name} leaves the graph unchanged: it is the onnxruntime row"
        try:
            return OrtRunner(
                paths["calibrated"], bc, device, f"{cfg.precision.name} graph TensorRT builds"
            )
        except PipelineError as e:
            return str(e)
    if name == "torch":
        from pipeline.bench import torch_runner

        return torch_runner.why_not(cfg.model) or torch_runner.TorchRunner(
            cfg.model,
            torch_runner.resolve_device(bc.device),
            int(bc.intra_op_threads),
            tf32=cfg.precision.name == "tf32",
        )
    from pipeline.engine import backend

    if why := backend.why_engine_cannot_run(fingerprint):
        return why
    from pipeline.bench import trt_runner
    from pipeline.engine import manifest, verify

    # A weight-stripped engine gets its weights back from the graph it was built from.
    refit = verify.refit_source(manifest.load(paths["engine"].parent), paths["calibrated"])
    return trt_runner.EngineRunner(
        paths["engine"], fingerprint_file.trt_flavour(fingerprint), refit_onnx=refit
    )


def run(
    cfg: PipelineConfig,
    profiles: list[Profile],
    paths: dict[str, Path],
    fingerprint: FingerprintRecord,
) -> BenchmarkRecord:
    """paths: export, calibrated (ONNX files), engine, reference (npz)."""
    bc = cfg.benchmark
    # The graph only: weights in external data stay on disk (sizes need the I/O specs).
    graph = onnx_model.load(paths["export"], check=False, weights=False)
    specs, outputs = onnx_model.inputs(graph), onnx_model.outputs(graph)
    vocabulary = decoder_bench.vocabulary(outputs)
    del graph
    headline, sweep = plan(bc, specs, profiles, samples.sample_axes(cfg.model, specs))
    points = list({p.key: p for p in [headline, *sweep]}.values())
    device = _device(bc.device, fingerprint)
    pci = _pci_bus_id() if device == "cuda" else None
    gpu_free = gpu_memory.free_bytes(pci) if device == "cuda" else None
    bench_sizes.check(cfg, specs, outputs, points, gpu_free)
    seed = int(cfg.model.seed) + INPUT_SEED_OFFSET
    reference, pairs = (
        export_file.reference_info(paths["reference"].parent),
        reference_file.read(paths["reference"]),
    )
    feeds, from_reference = choose_feeds(
        points,
        pairs,
        reference.get("source") == "folder",
        lambda shapes: bench_inputs(cfg.model, specs, shapes, seed, vocabulary),
    )
    gpu_before = gpu_conditions.snapshot(pci)
    side_by_side = Measuring(cfg, profiles, points, headline, feeds, pairs if bc.accuracy else [])
    unfed = decoder_runs.unfeedable(specs) if decoder_bench.applies(specs) else None
    if decoder_bench.applies(specs) and unfed is None:
        side_by_side.decoder = (specs, decoder_bench.plan(bc.decoder, profiles, vocabulary))
        side_by_side.prompts = generation.reference_prompts(pairs, specs)
    for name in bc.backends:
        side_by_side.backend(name, open_backend(name, cfg, paths, fingerprint, device), reference)
    _add_speedups(side_by_side.results, side_by_side.by_point, bc.baseline)
    record: BenchmarkRecord = {
        "profile": headline.profile,
        "shapes": headline.shapes,
        "headline": headline.key,
        "inputs": {"reference": reference, "from_reference_data": from_reference},
        "baseline": bc.baseline,
        "results": side_by_side.results,
        "by_shape": {p.key: side_by_side.by_point.get(p.key, {}) for p in sweep},
        "method": _method(bc),
        "conditions": conditions(bc, fingerprint, gpu_before, gpu_conditions.snapshot(pci)),
    }
    if side_by_side.decoder is not None:
        record["decoder"] = side_by_side.decoder_record()
    elif unfed is not None:  # a KV cache the phases cannot be fed: said, not guessed
        record["decoder"] = {"skipped": f"the decoder's phases are not timed: {unfed}"}
    return record


def _method(bc: BenchmarkConfig) -> TimingMethod:
    """How every figure was timed: the loop's budget and what the clock measures."""
    return {
        "warmup_s": bc.warmup_s,
        "min_duration_s": bc.min_duration_s,
        "min_iterations": bc.min_iterations,
        "max_duration_s": bc.max_duration_s,
        "min_tail_samples": bc.min_tail_samples,
        "latency": "host wall clock per iteration (perf_counter_ns); GPU stages by CUDA events",
    }


def _add_speedups(
    results: dict[str, dict[str, Any]],
    by_point: dict[str, dict[str, dict[str, Any]]],
    baseline: str,
) -> None:
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


def _device(requested: str, fingerprint: FingerprintRecord) -> str:
    """Where ONNX Runtime runs (and the GPU readings come from): the fingerprint
    already knows whether this machine has a GPU, without importing torch."""
    has_gpu = fingerprint.get("gpu") is not None
    if requested == "cuda" and not has_gpu:
        raise PipelineError(
            "benchmark.device=cuda but this machine has no GPU (see artifacts/fingerprint.json)"
        )
    return "cuda" if has_gpu and requested != "cpu" else "cpu"


def _pci_bus_id() -> str | None:
    try:
        from pipeline.machine.cudart import Cuda

        return Cuda.get().pci_bus_id(0)
    except PipelineError:
        return None
