"""One function per pipeline stage. DVC stages (stages/*.py) and the Hydra sweep
(pipeline/sweeps/job.py) both call these, so they share one code path and one store.

Each step imports the layers it uses inside its own body: a stage process then loads
only those (dvc.yaml lists exactly those folders as the stage's code deps, and a
store hit starts without numpy, onnx or TensorRT). Only pipeline.core is shared, and
of it not the config schema (OmegaConf), which the always-run fingerprint stage skips."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from pipeline.core import calibration_file, console, fileio, memory
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.core.numbers import MIB
from pipeline.core.stages import STAGES
from pipeline.flow import output_folder

if TYPE_CHECKING:
    # The schema types only: at run time a config is the DictConfig validate() made.
    from pipeline.core.config import PipelineConfig


class MachineSettings(Protocol):
    """The build settings the machine fingerprint reads."""

    @property
    def backend(self) -> str: ...
    @property
    def hardware_compatibility(self) -> str: ...
    @property
    def version_compatible(self) -> bool: ...
    @property
    def compute_capabilities(self) -> Sequence[str]: ...


class FingerprintParams(Protocol):
    """What fingerprint() reads of a config: PipelineConfig, or on the always-run
    fingerprint stage pipeline.machine.build_settings.Params (read without OmegaConf).
    That type is not named at this module's top: every stage would depend on its module."""

    @property
    def build(self) -> MachineSettings: ...


def fingerprint(cfg: FingerprintParams, layout: Layout) -> dict[str, Any]:
    from pipeline.machine import fingerprint as fp_lib

    if TYPE_CHECKING:
        from pipeline.core.config import BuildConfig
        from pipeline.machine.build_settings import BuildSettings
    # `build` is one of the two, as FingerprintParams says: collect names them.
    fp = fp_lib.collect(cast("BuildConfig | BuildSettings", cfg.build))
    # Unchanged (the usual no-op `dvc repro`): the file is left as it is, see fileio.
    fileio.write_bytes_if_changed(layout.fingerprint, fileio.to_json(fp).encode())
    return fp


def read_fingerprint(layout: Layout) -> dict[str, Any]:
    fp: dict[str, Any] = fileio.read_json(
        layout.fingerprint, "fingerprint (run the fingerprint stage)"
    )
    return fp


def export(cfg: PipelineConfig, layout: Layout) -> dict[str, Any]:
    from pipeline.export import export as export_lib
    from pipeline.flow import provenance

    peak = memory.StagePeak()
    with output_folder.writing(layout, layout.export_dir, stage="export"):
        model_sha256 = export_lib.source_sha256(cfg.model)
        summary = export_lib.export_model(cfg.model, cfg.profile, layout.export_dir)
        provenance.write(layout.export_dir, cfg, "export", model_sha256=model_sha256)
        rss = summary[memory.PEAK_KEY] = memory.record(layout.metrics_dir, "export", peak)
    console.table(
        f"export: {cfg.model.name}",
        [("graph", str(layout.export_graph)), memory.row(rss)],
    )
    return summary


def calibrate(cfg: PipelineConfig, layout: Layout) -> dict[str, Any]:
    """The precision-transformed graph, and its accuracy as a DVC metrics file, written
    pass or fail: every output, every metric, each gate result."""
    from pipeline.flow import provenance
    from pipeline.precision import transform as precision
    from pipeline.precision.gate import accuracy

    provenance.require(layout.export_dir, cfg, "export")
    peak = memory.StagePeak()
    with output_folder.writing(layout, layout.calibrate_dir, stage="calibrate"):
        try:
            summary = precision.transform(
                layout.export_dir, layout.calibrate_dir, cfg.precision, cfg.calibration, cfg.model
            )
        except accuracy.GateFailed as e:
            # the gate writes every metric, pass or fail, before the stage stops
            fileio.write_json(layout.accuracy_metrics, accuracy_metrics(cfg, e.summary))
            raise
        provenance.write(
            layout.calibrate_dir, cfg, "calibrate", source_sha256=summary["source_sha256"]
        )
        rss = memory.record(layout.metrics_dir, "calibrate", peak)
        summary[memory.PEAK_KEY] = rss
    metrics = accuracy_metrics(cfg, summary)
    fileio.write_json(layout.accuracy_metrics, metrics)
    random = accuracy.judged_on_random(summary)
    on_random, each = (f", {accuracy.ON_RANDOM}", ", random inputs") if random else ("", "")
    console.table(
        f"calibrate: {cfg.model.name} {cfg.precision.name}",
        [
            ("accuracy gate", ("passed" if metrics["gate_passed"] else "FAILED") + on_random),
            *[
                (f"{subject} {metric}", f"{r['value']:.4g} (gate {r['threshold']}{each})")
                for subject, by in metrics["gate"].items()
                for metric, r in by.items()
                if isinstance(r.get("value"), (int, float))
            ],
            *(
                [("fallback", f"kept {calibration_file.kept_types(summary['fallback'])}")]
                if summary.get("fallback", {}).get("needed")
                else []
            ),
            *_weight_rows(summary.get("calibration") or {}),
            ("graph", str(layout.calibrated_graph)),
            memory.row(rss),
        ],
    )
    return summary


def _weight_rows(calibration: dict[str, Any]) -> list[tuple[str, str]]:
    """What a quantized graph's GEMMs hold: their weights' bytes by stored type, and the
    share of GEMM FLOPs that reads a quantized input (a count of quantized nodes hides that
    one FFN projection outweighs ten attention MatMuls)."""
    weights, flops = calibration.get("gemm_weights"), calibration.get("gemm_flops") or {}
    if not weights or not weights["bytes"]:
        return []
    by_share = sorted(weights["share"].items(), key=lambda kv: -kv[1])
    text = " · ".join(f"{kind} {share:.0%}" for kind, share in by_share)
    text += f" of {sum(weights['bytes'].values()) / 1e6:.3g} MB"
    if flops.get("quantized_fraction") is not None:
        text += f"; quantized GEMM FLOPs {flops['quantized_fraction']:.0%}"
    return [("GEMM weights", text)]


def accuracy_metrics(cfg: PipelineConfig, summary: dict[str, Any]) -> dict[str, Any]:
    gate: dict[str, dict[str, Any]] = {}
    for r in summary["gate"]:
        gate.setdefault(r["subject"], {})[r["metric"]] = {
            k: r[k] for k in ("value", "threshold", "passed")
        }
    data = summary.get("calibration", {}).get("data") or summary.get("weak_typing", {}).get("data")
    metrics: dict[str, Any] = {
        "model": cfg.model.name,
        "precision": cfg.precision.name,
        "held_out_batches": summary["held_out_batches"],
        "accuracy": summary["accuracy"],
        "gate": gate,
        "gate_passed": all(r["passed"] for r in summary["gate"]),
        "failing": [r for r in summary["gate"] if not r["passed"]],
        "evaluated_with": summary.get("evaluated_with"),
        "reference_inputs": summary.get("reference"),
    }
    if data:
        metrics["calibration_data"] = {
            k: data[k] for k in ("source", "random", "num_samples") if k in data
        }
    if "reference_overlap" in summary:
        metrics["reference_overlap"] = summary["reference_overlap"]
    if "fallback" in summary:
        fb = summary["fallback"]
        metrics["fallback"] = {
            k: fb[k]
            for k in (
                "needed",
                "kept",
                "kept_fp32",
                "kept_fp16",
                "kept_int8",
                "quantized_matmuls",
                "matmuls_still_quantized",
                "quantized_gemms",
                "gemms_still_quantized",
                "graphs_evaluated",
                "placement",
                "error",
                "all_high_precision",
                "cache",
            )
            if k in fb
        }
    return metrics


def build(cfg: PipelineConfig, layout: Layout, progress: bool = True) -> dict[str, Any]:
    """Engine for this machine: from the store when the key exists (no TensorRT
    import at all), else built under the key's lock and put into the store."""
    from pipeline.flow import provenance

    peak = memory.StagePeak()
    fp = read_fingerprint(layout)
    provenance.require(layout.calibrate_dir, cfg, "calibrate")
    with output_folder.writing(layout, layout.engine_dir(fp["id"]), stage="build"):
        return _build(cfg, layout, fp, progress, peak)


def _build(
    cfg: PipelineConfig,
    layout: Layout,
    fp: dict[str, Any],
    progress: bool,
    peak: memory.StagePeak,
) -> dict[str, Any]:
    from pipeline.engine import cache_key
    from pipeline.engine import store as store_lib
    from pipeline.flow import engine_folder
    from pipeline.store import ENGINES, FileData

    onnx_path = layout.calibrated_graph
    if not onnx_path.exists():
        raise PipelineError(f"{onnx_path} not found; run the calibrate stage first")
    key_in = cache_key.engine_key_inputs(cfg, layout, fp)
    key = cache_key.cache_key(key_in)
    folder = layout.engine_dir(fp["id"])
    labels = engine_folder.store_labels(cfg, fp)
    store = store_lib.EngineStore(ENGINES.root(cfg.build.store_dir))

    def make() -> tuple[Mapping[str, FileData], dict[str, Any], str]:
        adopted = engine_folder.adopt_pulled(folder, key, key_in)
        if adopted is not None:
            memory.require_disk(store.root, sum(map(len, adopted.values())), "the pulled engine")
            return adopted, labels, "adopted the engine DVC restored"
        from pipeline.flow import build_files  # a miss only: a hit never imports the builder

        files = build_files.built(cfg, layout, fp, key, key_in, progress)
        # before the store writes a multi-GB engine (and links it into artifacts/)
        memory.require_disk_for_link(len(files["engine.plan"]), "the engine", store.root, folder)
        return files, labels, "miss, built"

    got = engine_folder.served(store, key, folder, make)
    if got.not_stored:  # a read-only store still serves hits; a miss is built here only
        console.warn(f"{got.not_stored}; the engine is in {folder} only, not in the store")
    console.note(
        f"engine store {got.event}: {key[:16]} ({cfg.model.name} {cfg.precision.name}, {fp['id']})"
    )
    manifest = _gated_manifest(cfg, layout, folder)
    # Every run, store hit or not: a hit records the small cost of a hit.
    rss = manifest[memory.PEAK_KEY] = memory.record(layout.metrics_dir, "build", peak)
    console.table(
        f"build: {cfg.model.name} {cfg.precision.name}",
        [
            ("engine store", f"{got.event}, key {key[:16]}"),
            (
                "engine",
                f"{manifest['engine']['bytes'] / MIB:.2f} MiB, "
                f"built in {manifest.get('build_seconds')} s",
            ),
            *_plan_rows(layout, manifest["engine"]["bytes"]),
            ("build gates", "passed"),
            ("folder", str(folder)),
            memory.row(rss),
        ],
    )
    # What this run did with the store (a sweep summary's "hit or built"); not in the file.
    manifest["store_event"] = got.event
    return manifest


def _plan_rows(layout: Layout, engine_bytes: int) -> list[tuple[str, str]]:
    """Of a quantized graph's engine: how much of it is GEMM weights. A TensorRT-RTX plan
    carries code per engine layer, and an int8 convolution is a layer of its own, so on a
    model of many small convolutions the quantized plan can outweigh the fp16 one; without
    an fp16 engine to compare with, this is what can be said (a sweep says the rest)."""

    if not layout.calibration_summary.is_file():
        return []
    calibration = calibration_file.read(layout.calibration_summary).get("calibration") or {}
    weights = sum(((calibration.get("gemm_weights") or {}).get("bytes") or {}).values())
    if not weights or engine_bytes < 2 * weights:
        return []
    return [
        (
            "engine holds",
            f"{weights / 1e6:.3g} MB of GEMM weights, {weights / engine_bytes:.0%} of the plan: "
            f"the rest is TensorRT's code per layer; an fp16 engine may be smaller "
            f"(a sweep over precision says: docs/precision.md, engine size)",
        )
    ]


def _gated_manifest(cfg: PipelineConfig, layout: Layout, folder: Path) -> dict[str, Any]:
    """The engine's manifest, once its build gates pass. Gates judge what was built and
    what the store served alike; a failure leaves metrics/gates.json saying why, and
    build() drops this machine's folder."""
    from pipeline.analysis import buildlog, gates
    from pipeline.engine import manifest as manifest_lib

    manifest = manifest_lib.load(folder)
    gates.check(
        cfg.build.gates,
        buildlog.load_summary(folder),
        (folder / "build.log").read_text(),
        manifest=manifest,
        metrics_path=layout.gates_metrics,
    )
    return manifest


def inspect(cfg: PipelineConfig, layout: Layout) -> dict[str, Any]:
    peak = memory.StagePeak()
    with output_folder.writing(
        layout, layout.inspect_dir, remove_on_failure=False, stage="inspect"
    ):
        from pipeline.flow import inspect_step

        return inspect_step.run(cfg, layout, read_fingerprint(layout), peak)


def benchmark(cfg: PipelineConfig, layout: Layout) -> dict[str, Any]:
    # Its files lie among other stages' in metrics/; one lock of its own also keeps two
    # benchmarks from measuring each other's load.
    what = f"the benchmark's files in {layout.metrics_dir}"
    peak = memory.StagePeak()
    with output_folder.writing(
        layout, layout.metrics_dir / "benchmark", what, remove_on_failure=False
    ):
        from pipeline.flow import benchmark_step

        return benchmark_step.run(cfg, layout, read_fingerprint(layout), peak)


def run_all(
    cfg: PipelineConfig,
    layout: Layout,
    on_step: Callable[[str, dict[str, Any]], None] | None = None,
    done: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every stage in order but those `done` holds results of; `on_step(name, result)`
    after each (a Hydra job logs it)."""
    results = dict(done or {})
    for name in STAGES:
        if name in results:
            continue
        results[name] = globals()[name](cfg, layout)
        if on_step is not None:
            on_step(name, results[name])
    return results
