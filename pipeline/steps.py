"""One function per pipeline stage. DVC stages (stages/*.py) and the Hydra sweep
(pipeline/run.py) both call these, so they share one code path and one store.

Each step imports the layers it uses inside its own body: a stage process then loads
only those (dvc.yaml lists exactly those folders as the stage's code deps, and a
store hit starts without numpy, onnx or TensorRT). Only pipeline.core is shared."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from pipeline.core import config as config_lib, fileio, hashing, provenance
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout


def fingerprint(cfg: Any, layout: Layout) -> dict:
    from pipeline.machine import fingerprint as fp_lib

    fp = fp_lib.collect(cfg.build)
    fileio.write_json(layout.fingerprint, fp)
    return fp


def read_fingerprint(layout: Layout) -> dict:
    return fileio.read_json(layout.fingerprint, "fingerprint (run the fingerprint stage)")


def export(cfg: Any, layout: Layout) -> dict:
    from pipeline.export import export as export_lib

    with _no_stale_output(layout.export_dir):
        model_sha256 = export_lib.source_sha256(cfg.model)
        summary = export_lib.export_model(cfg.model, layout.export_dir)
        provenance.write(layout.export_dir, cfg, "export", model_sha256=model_sha256)
    return summary


def calibrate(cfg: Any, layout: Layout) -> dict:
    """The precision-transformed graph, and its accuracy as a DVC metrics file."""
    from pipeline.precision import transform as precision

    provenance.require(layout.export_dir, cfg, "export")
    with _no_stale_output(layout.calibrate_dir):
        summary = precision.transform(layout.export_dir, layout.calibrate_dir, cfg.precision, cfg.calibration,
                                      cfg.model)
        provenance.write(layout.calibrate_dir, cfg, "calibrate", source_sha256=summary["source_sha256"])
    gate = {}
    for r in summary["gate"]:
        gate.setdefault(r["subject"], {})[r["metric"]] = {k: r[k] for k in ("value", "threshold", "passed")}
    data = summary.get("calibration", {}).get("data") or summary.get("weak_typing", {}).get("data")
    metrics = {"model": cfg.model.name, "precision": cfg.precision.name, "held_out_batches": summary["held_out_batches"],
               "accuracy": summary["accuracy"], "gate": gate, "gate_passed": all(r["passed"] for r in summary["gate"]),
               "evaluated_with": summary.get("evaluated_with")}
    if data:
        metrics["calibration_data"] = {k: data[k] for k in ("source", "random", "num_samples") if k in data}
    fileio.write_json(layout.metrics_dir / "accuracy.json", metrics)
    return summary


def build(cfg: Any, layout: Layout, progress: bool = True) -> dict:
    """Engine for this machine: from the store when the key exists (no TensorRT
    import at all), else built under the key's lock and put into the store."""
    fp = read_fingerprint(layout)
    provenance.require(layout.calibrate_dir, cfg, "calibrate")
    with _no_stale_output(layout.engine_dir(fp["id"])):
        return _build(cfg, layout, fp, progress)


@contextlib.contextmanager
def _no_stale_output(folder: Path) -> Iterator[None]:
    """A failed or interrupted stage removes its output: the previous run's output
    must not look current for the params that just failed (artifacts/build persists
    across runs, and a later stage run by hand would consume it)."""
    try:
        yield
    except BaseException:
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _build(cfg: Any, layout: Layout, fp: dict, progress: bool) -> dict:
    from pipeline.engine import cache_key, store as store_lib

    onnx_path = layout.calibrate_dir / "model.onnx"
    if not onnx_path.exists():
        raise PipelineError(f"{onnx_path} not found; run the calibrate stage first")
    key_in = cache_key.engine_key_inputs(cfg, layout, fp)
    key = cache_key.cache_key(key_in)
    store = store_lib.EngineStore(store_lib.default_root(cfg.build.store_dir))
    entry, event = store.get(key), "hit"
    if entry is None:
        with store.lock(key):
            entry = store.get(key)
            if entry is not None:
                event = "hit (built meanwhile by another process)"
            elif (adopted := _adopt_pulled(store, key, layout.engine_dir(fp["id"]), _labels(cfg, fp))) is not None:
                entry, event = adopted, "adopted the engine DVC restored"
            else:
                entry = store.put(key, _build_files(cfg, layout, fp, key, key_in, progress),
                                  labels=_labels(cfg, fp))
                event = "miss, built"
    print(f"engine store {event}: {key[:16]} ({cfg.model.name} {cfg.precision.name}, {fp['id']})", file=sys.stderr)
    # Only this machine's folder is replaced: artifacts/build keeps one folder per
    # fingerprint (a persistent DVC output), so engines for other GPUs travel too.
    with fileio.staged_dir(layout.engine_dir(fp["id"])) as out:
        for name in entry.files:
            _link_or_copy(entry.file(name), out / name)
    # Gates judge what was built and what the store served alike; a failure leaves
    # metrics/gates.json saying why, and build() drops this machine's folder.
    from pipeline.analysis import buildlog, gates

    folder = layout.engine_dir(fp["id"])
    manifest = fileio.read_json(folder / "manifest.json", "build manifest")
    gates.check(cfg.build.gates, buildlog.load_summary(folder), (folder / "build.log").read_text(),
                manifest=manifest, metrics_path=layout.metrics_dir / "gates.json")
    # What this run did with the store (a sweep summary's "hit or built"); not in the file.
    manifest["store_event"] = event
    return manifest


def _link_or_copy(src: Path, dest: Path) -> None:
    """A hard link costs nothing for a large engine; another filesystem gets a copy.
    Editing the artifact in place would change the store's bytes too, which the store's
    sha256 check on every read then quarantines, never serves."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _adopt_pulled(store: Any, key: str, folder: Path, labels: dict) -> Any:
    """An engine DVC pulled or kept for this fingerprint, with this very key and
    intact bytes, goes into the store instead of being rebuilt."""
    manifest_path = folder / "manifest.json"
    if not manifest_path.exists():
        return None
    try:
        manifest = fileio.read_json(manifest_path)
    except PipelineError:
        return None
    if manifest.get("cache_key") != key:
        return None
    from pipeline.engine.verify import engine_intact

    if not engine_intact(folder, manifest):
        print(f"warning: {folder / 'engine.plan'} does not match its manifest; rebuilding", file=sys.stderr)
        return None
    return store.put(key, {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}, labels)


def _labels(cfg: Any, fp: dict) -> dict:
    gpu = fp["gpu"]["name"] if fp.get("gpu") else "no GPU"
    return {"model": cfg.model.name, "precision": cfg.precision.name, "gpu": gpu,
            "trt": f"{fp['trt_flavour']} {fp['trt_version']}", "fingerprint": fp["id"]}


def _resolved_profiles(cfg: Any, layout: Layout, onnx_path: Path, onnx_sha256: str) -> list[dict]:
    """From the input specs calibrate recorded for this very graph (its sha256 is checked),
    so the build reads the ONNX once, in TensorRT's parser, not again for its inputs."""
    from pipeline.engine import build as build_lib
    from pipeline.export import onnx_model, profiles

    summary = fileio.read_json(layout.calibrate_dir / "calibration.json", "calibration summary")
    specs = summary.get("inputs")
    if not isinstance(specs, list) or summary.get("onnx_sha256") != onnx_sha256:
        return build_lib.resolve_profiles(cfg.profile, onnx_path)
    return profiles.resolve(cfg.profile, [onnx_model.TensorSpec(s["name"], s["dtype"], tuple(s["dims"])) for s in specs])


def _build_files(cfg: Any, layout: Layout, fp: dict, key: str, key_in: dict, progress: bool) -> dict[str, bytes]:
    from pipeline.analysis import buildlog
    from pipeline.engine import build as build_lib, cache_key, manifest as manifest_lib, timing_cache

    onnx_path = layout.calibrate_dir / "model.onnx"
    resolved = _resolved_profiles(cfg, layout, onnx_path, key_in["onnx_sha256"])
    tcache = timing_cache.TimingCache.for_fingerprint(cfg.build.store_dir, fp["id"], cfg.build.timing_cache)
    result = build_lib.build_engine(onnx_path, cfg.precision, cfg.build, resolved, fp["trt_flavour"], progress,
                                    timing_cache=tcache)
    # The parser logs the file it read; keep machine paths out of a shared artifact.
    folder = f"{onnx_path.parent.resolve()}/"
    records = buildlog.redacted([r._replace(message=r.message.replace(folder, "")) for r in result.records],
                                cfg.build.log_redactions)
    summary = buildlog.summarize(records)
    inputs = {
        "onnx_sha256": key_in["onnx_sha256"],
        "calibration_sha256": key_in["calibration_sha256"],
        "plugins_sha256": cache_key.plugin_sha256(cfg.build.plugins),
        "tools": tool_versions(),
    }
    manifest = manifest_lib.make(
        fingerprint=fp, inputs=inputs, build_cfg=config_lib.to_dict(cfg.build),
        precision_cfg=config_lib.to_dict(cfg.precision), profiles=resolved, result=result, summary=summary,
        engine_sha256=hashing.sha256_bytes(result.engine), cache_key=key)
    manifest["key_inputs"] = key_in
    manifest["timing_cache"] = tcache.report() if tcache else {"mode": "off"}
    return {
        "engine.plan": result.engine,
        "manifest.json": fileio.to_json(manifest).encode(),
        "build.log": buildlog.format_log(records).encode(),
        "network.json": fileio.to_json(result.network).encode(),
        "build_summary.json": fileio.to_json(summary).encode(),
    }


def tool_versions() -> dict:
    from pipeline.machine.fingerprint import package_version

    dists = ("onnx", "onnxruntime", "nvidia-modelopt", "torch", "polygraphy", "tensorrt-rtx-cu13", "tensorrt-cu13")
    return {d: v for d in dists if (v := package_version(d)) is not None}


def inspect(cfg: Any, layout: Layout) -> dict:
    from pipeline import upstream
    from pipeline.analysis import engine_inspector
    from pipeline.report import report as report_lib, report_html

    fp = read_fingerprint(layout)
    engine_dir = layout.engine_dir(fp["id"])
    upstream.current(cfg, layout, fp)
    inspection = (engine_inspector.inspect(engine_dir / "engine.plan", fp) if cfg.inspect.engine_inspector
                  else {"available": False, "reason": "switched off (inspect.engine_inspector=false)"})
    report = report_lib.make_report(layout.export_dir / "model.onnx", layout.calibrate_dir / "model.onnx",
                                    engine_dir, cfg.inspect, inspection)
    report["precision_transform"] = report_lib.precision_transform(
        fileio.read_json(layout.calibrate_dir / "calibration.json", "calibration summary"))
    rows = int(cfg.inspect.max_table_rows)
    with fileio.staged_dir(layout.inspect_dir) as tmp:
        fileio.write_json(tmp / "report.json", report)
        fileio.write_text(tmp / "report.md", report_lib.to_markdown(report, rows))
        if cfg.inspect.html:
            fileio.write_text(tmp / "report.html", report_html.to_html(report, rows))
    return report


def benchmark(cfg: Any, layout: Layout) -> dict:
    from pipeline import upstream
    from pipeline.bench import benchmark as bench_lib
    from pipeline.report import benchmark_report

    fp = read_fingerprint(layout)
    engine_dir = layout.engine_dir(fp["id"])
    manifest = upstream.current(cfg, layout, fp)
    paths = {"export": layout.export_dir / "model.onnx", "calibrated": layout.calibrate_dir / "model.onnx",
             "engine": engine_dir / "engine.plan", "reference": layout.export_dir / "reference.npz"}
    metrics = bench_lib.run(cfg, manifest["config"]["profiles"], paths, fp)
    metrics["precision"] = cfg.precision.name
    metrics["model"] = cfg.model.name
    rows = benchmark_report.plot_rows(metrics)
    out = layout.metrics_dir
    fileio.write_json(out / "benchmark.json", metrics)
    fileio.write_text(out / "benchmark.md", benchmark_report.to_markdown(metrics))
    # DVC draws one plot per file, so latency and throughput each get one (same rows).
    fileio.write_json(out / "benchmark_latency.json", rows)
    fileio.write_json(out / "benchmark_throughput.json", rows)
    return metrics


ORDER = ("fingerprint", "export", "calibrate", "build", "inspect", "benchmark")


def run_all(cfg: Any, layout: Layout, on_step: Callable[[str, dict], None] | None = None) -> dict:
    """Every stage in order; `on_step(name, result)` after each (a Hydra job logs it)."""
    results = {}
    for name in ORDER:
        results[name] = globals()[name](cfg, layout)
        if on_step is not None:
            on_step(name, results[name])
    return results
