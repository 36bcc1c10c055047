"""The build stage: this machine's engine, from the engine store when its key is there
(no TensorRT import at all), else built under the key's lock and stored; its build gates
judged on every run, hit or not."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core import console, memory
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.core.numbers import MIB
from pipeline.flow import output_folder
from pipeline.records import calibration_file
from pipeline.records.fingerprint_file import FingerprintRecord

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.records.build_file import BuildRecord, Manifest


def run(
    cfg: PipelineConfig, layout: Layout, fp: FingerprintRecord, progress: bool = True
) -> BuildRecord:
    """Engine for this machine: from the store when the key exists (no TensorRT
    import at all), else built under the key's lock and put into the store."""
    from pipeline.flow import provenance

    peak = memory.StagePeak()
    provenance.require(layout.calibrate_dir, cfg, "calibrate")
    refuse_unpinned(cfg, fp)
    with output_folder.writing(layout, layout.engine_dir(fp["id"]), stage="build"):
        return _build(cfg, layout, fp, progress, peak)


def refuse_unpinned(cfg: PipelineConfig, fp: FingerprintRecord) -> None:
    """One line, not an engine, where this machine's TensorRT is not the pinned build
    image's (pin.build: core/ngc.py)."""
    from pipeline.core import ngc

    if problem := ngc.machine_problem(cfg.pin, fp):
        raise PipelineError(problem)


def _build(
    cfg: PipelineConfig,
    layout: Layout,
    fp: FingerprintRecord,
    progress: bool,
    peak: memory.StagePeak,
) -> BuildRecord:
    from pipeline.engine import cache_key
    from pipeline.engine.store import EngineStore
    from pipeline.flow import engine_folder
    from pipeline.store import ENGINES, FileData

    onnx_path = layout.calibrated_graph
    if not onnx_path.exists():
        raise PipelineError(f"{onnx_path} not found; run the calibrate stage first")
    key_in = cache_key.engine_key_inputs(cfg, layout, fp)
    key = cache_key.cache_key(key_in)
    folder = layout.engine_dir(fp["id"])
    labels = engine_folder.store_labels(cfg, fp)
    store = EngineStore(ENGINES.root(cfg.build.store_dir))

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
    manifest: BuildRecord = {**_gated_manifest(cfg, layout, folder)}
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
            *_plan_rows(cfg, layout, manifest),
            ("build gates", "passed"),
            ("folder", str(folder)),
            memory.row(rss),
        ],
    )
    # What this run did with the store (a sweep summary's "hit or built"); not in the file.
    manifest["store_event"] = got.event
    return manifest


def _plan_rows(cfg: PipelineConfig, layout: Layout, manifest: BuildRecord) -> list[tuple[str, str]]:
    """Where the engine stands: its bytes against the fp16 and fp32 engines of the same
    graph, settings and machine that calibrate measured (flow/engine_standing.py), with a
    line when a quantized engine is the larger. Without them, how much of a quantized plan
    is GEMM weights, which is what can be said then."""
    from pipeline.core import engine_sizes
    from pipeline.flow import engine_standing

    rows = []
    per = engine_standing.per_parameter(cfg, layout, manifest)
    if per is not None:
        manifest["per_parameter"] = per
        rows.append(("per parameter", engine_sizes.per_parameter_text(per, cfg.precision.name)))
    stand = engine_standing.standing(cfg, layout, manifest)
    if "against" in stand:
        manifest["against"] = stand["against"]
        if stand.get("larger"):
            console.warn(stand["larger"])
        return [*rows, ("against", engine_standing.text(stand))]
    if "other build settings" in stand.get("note", ""):
        return [*rows, ("against", stand["note"])]
    if not layout.calibration_summary.is_file():
        return rows
    calibration = calibration_file.read(layout.calibration_summary).get("calibration") or {}
    return [*rows, *_weight_rows(calibration, manifest["engine"]["bytes"])]


def _weight_rows(calibration: Mapping[str, Any], engine_bytes: int) -> list[tuple[str, str]]:
    """Of a quantized graph's engine with no reference measured: how much of it is GEMM
    weights. A TensorRT-RTX plan carries code per engine layer, and an int8 convolution is a
    layer of its own, so on a model of many small convolutions the quantized plan can
    outweigh the fp16 one."""
    weights = sum(((calibration.get("gemm_weights") or {}).get("bytes") or {}).values())
    if not weights or engine_bytes < 2 * weights:
        return []
    return [
        (
            "engine holds",
            f"{weights / 1e6:.3g} MB of GEMM weights, {weights / engine_bytes:.0%} of the plan: "
            f"the rest is TensorRT's code per layer; an fp16 engine may be smaller "
            f"(build.reference_engines measures it: docs/precision.md, engine size)",
        )
    ]


def _gated_manifest(cfg: PipelineConfig, layout: Layout, folder: Path) -> Manifest:
    """The engine's manifest, once its build gates pass. Gates judge what was built and
    what the store served alike; a failure leaves metrics/gates.json saying why, and
    build() drops this machine's folder."""
    from pipeline.analysis import buildlog, gates
    from pipeline.engine import manifest

    record = manifest.load(folder)
    gates.check(
        cfg.build.gates,
        buildlog.load_summary(folder),
        (folder / "build.log").read_text(),
        manifest=record,
        metrics_path=layout.gates_metrics,
    )
    return record
