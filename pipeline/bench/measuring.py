"""Each backend measured at the benchmark's points and inputs, one after another: its
times at every point, its outputs against the fp32 reference, its slowest layers, and a
decoder's two phases (pipeline/bench/decoder_bench.py). A backend that fails to run is an
error with its cause, unless it is optional (then a skipped row saying why)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from pipeline.bench import cuda_timing, decoder_bench, generation, measure_loop
from pipeline.bench.bench_shapes import Pair, Point, locate
from pipeline.bench.runner import Feeds, Runner, TimingJob
from pipeline.core import console
from pipeline.core.errors import PipelineError, first_line
from pipeline.graph import onnx_model
from pipeline.inputs.profiles import Profile
from pipeline.precision.gate import accuracy
from pipeline.precision.gate.tasks import OutputTasks

if TYPE_CHECKING:
    from pipeline.core.config import BenchmarkConfig, PipelineConfig
    from pipeline.records.export_file import ReferenceSource

# Backends whose failure to run is a finding (skipped with the reason), not an error:
# ONNX Runtime lacks CPU kernels for some bf16/fp8 graphs.
OPTIONAL = frozenset({"onnxruntime_calibrated"})


def progress_bar(label: str) -> tuple[console.Bar, Callable[[float], None]]:
    """(bar, update): update takes the loop's fraction done (pipeline.bench.timing)."""
    bar = console.bar(total=100, desc=f"benchmark {label}", percent=True)

    def update(fraction: float) -> None:
        bar.set(int(fraction * 100))

    return bar, update


def _summarise(
    times: dict[str, np.ndarray], batch: int, bench_cfg: BenchmarkConfig
) -> cuda_timing.TimingSummary:
    out: cuda_timing.TimingSummary
    if len(times) > 1:
        out = cuda_timing.summarise(times, batch, int(bench_cfg.min_tail_samples))
    else:
        out = {**measure_loop.stats(times["host"], batch, int(bench_cfg.min_tail_samples))}
    n = len(times["host"])
    if measure_loop.Budget.of(bench_cfg).cut_short(n):
        out["cut_short"] = (
            f"stopped by benchmark.max_duration_s={bench_cfg.max_duration_s} after {n} "
            f"iteration(s), short of benchmark.min_iterations={bench_cfg.min_iterations}"
        )
    return out


# Open shape: benchmark._add_speedups adds speedup_vs_<benchmark.baseline>, named by the config.
def brief(result: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "median_ms",
        "mean_ms",
        "p99_ms",
        "throughput_per_s",
        "iterations",
        "batch",
        "seq",
        "low_sample_percentiles",
    )
    out = {k: result[k] for k in keep if k in result}
    if "gpu" in result:
        out["gpu_compute_median_ms"] = result["gpu"]["compute_ms"]["median_ms"]
    return out


# Open shape: one entry per model output, by its name (accuracy.compare), or a skip and why.
def _accuracy(
    runner: Runner, references: list[Pair], profiles: list[Profile], tasks: OutputTasks
) -> dict[str, Any]:
    try:  # each batch its own profile: a decoder's prefill and decode steps differ
        index = [locate({k: list(v.shape) for k, v in b.items()}, profiles) for b, _ in references]
    except PipelineError as e:
        return {"status": "skipped", "reason": f"reference inputs do not fit the engine: {e}"}
    got = [runner.infer(inputs, i) for (inputs, _), i in zip(references, index)]
    return accuracy.compare([outputs for _, outputs in references], got, tasks)


def measure_backend(
    name: str,
    runner: Runner,
    points: list[Point],
    feeds: dict[str, Feeds],
    bench_cfg: BenchmarkConfig,
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for point in points:
        bar, update = progress_bar(f"{name} {point.key}")
        try:
            times, notes = runner.time(
                TimingJob(feeds[point.key], point.profile_index, bench_cfg, update)
            )
        finally:
            bar.close()
        out[point.key] = {**_summarise(times, point.batch, bench_cfg), **notes}
        if point.seq is not None:
            out[point.key]["seq"] = point.seq
    return out


def _run_backend(
    name: str,
    runner: Runner,
    points: list[Point],
    headline: Point,
    feeds: dict[str, Feeds],
    references: list[Pair],
    profiles: list[Profile],
    cfg: PipelineConfig,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    bc = cfg.benchmark
    measured = measure_backend(name, runner, points, feeds, bc)
    result: dict[str, Any] = {
        "status": "ok",
        "label": runner.label,
        "device": runner.device,
        "profile": headline.profile,
        **measured[headline.key],
    }
    if references:
        result["accuracy"] = _accuracy(runner, references, profiles, OutputTasks.of(cfg.model))
    if bc.layer_profile_top:
        layers = runner.layer_times(
            feeds[headline.key],
            headline.profile_index,
            int(bc.layer_profile_iterations),
            int(bc.layer_profile_top),
        )
        if layers is not None:
            result["layers"] = layers
    return result, measured


class DecoderRecord(TypedDict, total=False):
    """benchmark.json's `decoder`, or only `skipped` where the phases cannot be fed."""

    batch: int
    kv_cache: decoder_bench.KvCacheSize
    backends: dict[str, decoder_bench.DecoderPhases]  # backend -> TTFT and TPOT by length
    generation: dict[str, generation.GenerationSummary]  # backend -> its greedy runs
    skipped: str


class Measuring:
    """Every backend at the same points and inputs; each one's result, and each point's
    figures by backend."""

    def __init__(
        self,
        cfg: PipelineConfig,
        profiles: list[Profile],
        points: list[Point],
        headline: Point,
        feeds: dict[str, Feeds],
        references: list[Pair],
    ) -> None:
        self.cfg, self.profiles, self.points, self.headline = cfg, profiles, points, headline
        self.feeds, self.references = feeds, references
        self.results: dict[str, dict[str, Any]] = {}
        # point key -> backend -> brief()
        self.by_point: dict[str, dict[str, dict[str, Any]]] = {}
        # a decoder's inputs and what of its phases is timed; each backend's figures
        self.decoder: tuple[list[onnx_model.TensorSpec], decoder_bench.Plan] | None = None
        self.phases: dict[str, decoder_bench.DecoderPhases] = {}
        # a decoder's reference prompts, generated greedily through each backend
        self.prompts: list[generation.Prompt] = []
        self.generations: dict[str, generation.GenerationSummary] = {}

    def backend(self, name: str, runner: Runner | str, reference: ReferenceSource) -> None:
        if isinstance(runner, str):
            self.results[name] = {"status": "skipped", "reason": runner}
            return
        try:
            self.results[name], measured = _run_backend(
                name, runner, self.points, self.headline, self.feeds, self.references,
                self.profiles, self.cfg,
            )  # fmt: skip
            if self.decoder is not None:
                specs, what = self.decoder
                self.phases[name] = decoder_bench.measure(
                    runner, specs, self.profiles, what, _median_ms(name, self.cfg.benchmark)
                )
                if self.prompts:
                    self.generations[name] = _generated(name, runner, specs, self)
        except Exception as e:
            if name not in OPTIONAL:
                raise _backend_failure(runner, e, reference) from None
            self.results[name], measured = (
                {"status": "skipped", "reason": f"{runner.label}: {first_line(e)}"},
                {},
            )
        finally:
            runner.close()
        for key, summary in measured.items():
            self.by_point.setdefault(key, {})[name] = brief(summary)

    def decoder_record(self) -> DecoderRecord:
        """benchmark.json's `decoder`: the KV cache's size and each backend's phases."""
        assert self.decoder is not None, "only for a decoder"
        specs, what = self.decoder
        record: DecoderRecord = {
            "batch": what.batch,
            "kv_cache": decoder_bench.kv_cache(specs, self.profiles),
            "backends": self.phases,
        }
        if self.generations:
            record["generation"] = self.generations
        return record


def _generated(
    name: str, runner: Runner, specs: list[onnx_model.TensorSpec], measuring: Measuring
) -> generation.GenerationSummary:
    """The reference prompts generated greedily through `runner`, against fp32's tokens."""
    # a backend with steps of its own (an engine: the cache kept on the device) says so
    own = getattr(runner, "generation_steps", None)
    steps = (
        own(specs, measuring.profiles)
        if own is not None
        else generation.HostSteps(runner, specs, measuring.profiles)
    )
    bar, update = progress_bar(f"{name} generation")
    runs = []
    try:
        for i, prompt in enumerate(measuring.prompts):
            runs.append(generation.generate(steps, prompt))
            update((i + 1) / len(measuring.prompts))
    finally:
        bar.close()
    return generation.summary(runs, measuring.prompts)


def _median_ms(backend: str, bench_cfg: BenchmarkConfig) -> decoder_bench.Timer:
    """The decoder benchmark's timer: this benchmark's loop and budget, its median ms."""

    def timer(runner: Runner, feeds: Feeds, profile: int, label: str) -> float:
        bar, update = progress_bar(f"{backend} {label}")
        try:
            times, _ = runner.time(TimingJob(feeds, profile, bench_cfg, update))
        finally:
            bar.close()
        return float(_summarise(times, 1, bench_cfg)["median_ms"])

    return timer


def _backend_failure(runner: Runner, e: Exception, reference: ReferenceSource) -> Exception:
    """A required backend's failure: this tool's own errors as they are; the runtime failing
    on this model and these inputs (ONNX Runtime's Fail on a Mod by zero of random
    integers) is the user's to fix, in one line."""
    if isinstance(e, PipelineError):
        return e
    hint = (
        " (the inputs are random: model.reference_data or model.input_ranges gives it real ones)"
        if reference.get("random")
        else ""
    )
    return PipelineError(
        f"benchmark: {runner.label} failed: {type(e).__name__}: {first_line(e)}{hint}"
    )
