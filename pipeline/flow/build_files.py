"""The files of a freshly built engine: engine.plan, manifest.json, build.log,
network.json and the build summary, made by TensorRT from calibrate's graph. The build
step (pipeline/flow/stages.py) stores them under the engine's cache key."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core import config, fileio, hashing
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.records import calibration_file
from pipeline.records.fingerprint_file import FingerprintRecord
from pipeline.store import PendingFiles

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.engine.build import BuildResult
    from pipeline.engine.timing_cache import TimingCache
    from pipeline.engine.trt_hooks import Record


def resolved_profiles(
    cfg: PipelineConfig, layout: Layout, onnx_path: Path, onnx_sha256: str
) -> list[dict[str, Any]]:
    """From the input specs calibrate recorded for this very graph (its sha256 is checked),
    so the build reads the ONNX once, in TensorRT's parser, not again for its inputs."""
    from pipeline.engine import build
    from pipeline.graph import onnx_model
    from pipeline.inputs import profiles

    summary = calibration_file.read(layout.calibration_summary)
    specs = summary.get("inputs")
    if not isinstance(specs, list) or summary.get("onnx_sha256") != onnx_sha256:
        return build.resolve_profiles(cfg.profile, onnx_path)
    return profiles.resolve(
        cfg.profile, [onnx_model.TensorSpec(s["name"], s["dtype"], tuple(s["dims"])) for s in specs]
    )


def built(
    cfg: PipelineConfig,
    layout: Layout,
    fp: FingerprintRecord,
    key: str,
    key_in: Mapping[str, Any],
    progress: bool,
) -> PendingFiles:
    """A fresh engine's files; a build TensorRT gives up on keeps its log and names it."""
    from pipeline.engine import build

    try:
        return make(cfg, layout, fp, key, key_in, progress)
    except build.BuildFailed as e:
        log = keep_failed_log(layout, fp["id"], e.records)
        raise PipelineError(f"{e} (TensorRT's log: {log})") from None


def make(
    cfg: PipelineConfig,
    layout: Layout,
    fp: FingerprintRecord,
    key: str,
    key_in: Mapping[str, Any],
    progress: bool,
) -> PendingFiles:
    """The entry's files: the engine at once, the files describing it made in a thread
    while the store writes the engine (PendingFiles)."""
    from pipeline.core import imports
    from pipeline.engine import build

    # What describing the engine and the stage's end need, imported while TensorRT builds.
    imports.prefetch(
        "importlib.metadata",
        "pipeline.analysis.buildlog",
        "pipeline.analysis.gates",
        "pipeline.engine.manifest",
        "rich.console",
        "rich.table",
    )
    onnx_path = layout.calibrated_graph
    resolved = resolved_profiles(cfg, layout, onnx_path, key_in["onnx_sha256"])
    result, tcache = build.build_as_configured(
        cfg, fp, onnx_path, resolved, progress, cfg.build.timing_cache
    )
    # hashlib lets go of the GIL for large buffers: the engine's hash, the store's write of
    # it and the log's parsing run side by side.
    pool = ThreadPoolExecutor(max_workers=2)
    engine_sha256 = pool.submit(hashing.sha256_bytes, result.engine)
    later = pool.submit(
        _describe, cfg, onnx_path, fp, key, key_in, resolved, result, tcache, engine_sha256
    )
    pool.shutdown(wait=False)
    return PendingFiles({"engine.plan": result.engine}, later, DESCRIBING)


DESCRIBING = ("manifest.json", "build.log", "network.json", "build_summary.json")


def _describe(
    cfg: PipelineConfig,
    onnx_path: Path,
    fp: FingerprintRecord,
    key: str,
    key_in: Mapping[str, Any],
    resolved: list[dict[str, Any]],
    result: BuildResult,
    tcache: TimingCache | None,
    engine_sha256: Future[str],
) -> dict[str, bytes]:
    from pipeline.analysis import buildlog
    from pipeline.engine import cache_key, manifest

    # The parser logs the file it read; keep machine paths out of a shared artifact.
    folder = f"{onnx_path.parent.resolve()}/"
    records = buildlog.redacted(
        [r._replace(message=r.message.replace(folder, "")) for r in result.records],
        cfg.build.log_redactions,
    )
    summary = buildlog.summarize(records)
    log_text = buildlog.format_log(records)
    inputs = {
        "onnx_sha256": key_in["onnx_sha256"],
        "calibration_sha256": key_in["calibration_sha256"],
        "plugins_sha256": cache_key.plugin_sha256(cfg.build.plugins),
        "tools": tool_versions(),
    }
    record = manifest.make(
        fingerprint=fp,
        inputs=inputs,
        build_cfg=config.to_dict(cfg.build),
        precision_cfg=config.to_dict(cfg.precision),
        profiles=resolved,
        result=result,
        summary=summary,
        engine_sha256=engine_sha256.result(),
        cache_key=key,
    )
    record["key_inputs"] = key_in
    record["timing_cache"] = tcache.report() if tcache else {"mode": "off"}
    record["image"] = {"pinned": pinned_build(cfg), "running": fp.get("container")}
    return {
        "manifest.json": fileio.to_json(record).encode(),
        "build.log": log_text.encode(),
        "network.json": fileio.to_json(result.network, compact=True).encode(),
        "build_summary.json": fileio.to_json(summary, compact=True).encode(),
    }


def pinned_build(cfg: PipelineConfig) -> str | None:
    """The pinned build image's reference (pin.build), or None where nothing is pinned."""
    from pipeline.core import ngc

    image = ngc.pinned(cfg.pin, "build")
    return str(image) if image else None


def keep_failed_log(layout: Layout, fingerprint_id: str, records: list[Record]) -> Path:
    """A failed build's TensorRT log, kept where the next run's outputs never go (the
    layout's .cache/, beside its locks) and named in the error line: the build stage leaves
    no output of its own when it fails."""
    from pipeline.analysis import buildlog

    path = layout.root / ".cache" / "logs" / f"build-failed-{fingerprint_id}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    fileio.write_bytes(path, buildlog.format_log(records).encode())
    return path


def tool_versions() -> dict[str, str]:
    """The libraries whose version can change an export, a calibration, an engine or a
    measurement (a manifest records them; a sweep job's reuse key includes them)."""
    from pipeline.machine.fingerprint import package_version

    dists = (
        "onnx",
        "onnxruntime",
        "nvidia-modelopt",
        "torch",
        "polygraphy",
        "numpy",
        "tensorrt-rtx-cu13",
        "tensorrt-cu13",
    )
    return {d: v for d in dists if (v := package_version(d)) is not None}
