"""One function per pipeline stage. DVC stages (stages/*.py) and the Hydra sweep
(pipeline/run.py) both call these, so they share one code path and one store.

Each step imports the layers it uses inside its own body: a stage process then loads
only those (dvc.yaml lists exactly those folders as the stage's code deps, and a
store hit starts without numpy, onnx or TensorRT). Only pipeline.core is shared."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from pipeline.core import config as config_lib, fileio, hashing
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

    return export_lib.export_model(cfg.model, layout.export_dir)


def calibrate(cfg: Any, layout: Layout) -> dict:
    """The precision-transformed graph, and its accuracy as a DVC metrics file, written
    pass or fail: every output, every metric, each gate result."""
    from pipeline.precision import accuracy, transform as precision

    try:
        summary = precision.transform(layout.export_dir, layout.calibrate_dir, cfg.precision, cfg.calibration,
                                      cfg.model)
    except accuracy.GateFailed as e:
        fileio.write_json(layout.metrics_dir / "accuracy.json", accuracy_metrics(cfg, e.summary))
        raise
    fileio.write_json(layout.metrics_dir / "accuracy.json", accuracy_metrics(cfg, summary))
    return summary


def accuracy_metrics(cfg: Any, summary: dict) -> dict:
    gate = {}
    for r in summary["gate"]:
        gate.setdefault(r["subject"], {})[r["metric"]] = {k: r[k] for k in ("value", "threshold", "passed")}
    data = summary.get("calibration", {}).get("data") or summary.get("weak_typing", {}).get("data")
    metrics = {"model": cfg.model.name, "precision": cfg.precision.name, "held_out_batches": summary["held_out_batches"],
               "accuracy": summary["accuracy"], "gate": gate, "gate_passed": all(r["passed"] for r in summary["gate"]),
               "failing": [r for r in summary["gate"] if not r["passed"]],
               "evaluated_with": summary.get("evaluated_with"), "reference_inputs": summary.get("reference")}
    if data:
        metrics["calibration_data"] = {k: data[k] for k in ("source", "random", "num_samples") if k in data}
    if "reference_overlap" in summary:
        metrics["reference_overlap"] = summary["reference_overlap"]
    if "fallback" in summary:
        fb = summary["fallback"]
        metrics["fallback"] = {k: fb[k] for k in ("needed", "kept_fp32", "quantized_matmuls", "matmuls_still_quantized",
                                                  "error", "all_high_precision", "cache") if k in fb}
    return metrics


def build(cfg: Any, layout: Layout, progress: bool = True) -> dict:
    """Engine for this machine: from the store when the key exists (no TensorRT
    import at all), else built under the key's lock and put into the store."""
    fp = read_fingerprint(layout)
    try:
        return _build(cfg, layout, fp, progress)
    except BaseException:
        # artifacts/build persists across runs; a failed build must not leave this
        # machine's engine from an earlier config looking current.
        _drop_stale(layout.engine_dir(fp["id"]))
        raise


def _drop_stale(folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)


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
            shutil.copyfile(entry.file(name), out / name)
    # Gates judge what was built and what the store served alike; a failure leaves
    # metrics/gates.json saying why, and build() drops this machine's folder.
    from pipeline.analysis import buildlog, gates

    folder = layout.engine_dir(fp["id"])
    manifest = fileio.read_json(folder / "manifest.json", "build manifest")
    gates.check(cfg.build.gates, buildlog.load_summary(folder), (folder / "build.log").read_text(),
                manifest=manifest, metrics_path=layout.metrics_dir / "gates.json")
    return manifest


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


def _build_files(cfg: Any, layout: Layout, fp: dict, key: str, key_in: dict, progress: bool) -> dict[str, bytes]:
    from pipeline.analysis import buildlog
    from pipeline.engine import build as build_lib, cache_key, manifest as manifest_lib, timing_cache

    onnx_path = layout.calibrate_dir / "model.onnx"
    resolved = build_lib.resolve_profiles(cfg.profile, onnx_path)
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
    from pipeline.analysis import engine_inspector
    from pipeline.report import report as report_lib, report_html

    from pipeline.engine.verify import assert_loadable

    fp = read_fingerprint(layout)
    engine_dir = layout.engine_dir(fp["id"])
    assert_loadable(engine_dir, fp)
    inspection = (engine_inspector.inspect(engine_dir / "engine.plan", fp) if cfg.inspect.engine_inspector
                  else {"available": False, "reason": "switched off (inspect.engine_inspector=false)"})
    report = report_lib.make_report(layout.export_dir / "model.onnx", layout.calibrate_dir / "model.onnx",
                                    engine_dir, cfg.inspect, inspection)
    report["precision_transform"] = report_lib.precision_transform(
        fileio.read_json(layout.calibrate_dir / "calibration.json", "calibration summary"))
    report_lib.mark_kept_nodes(report)
    rows = int(cfg.inspect.max_table_rows)
    with fileio.staged_dir(layout.inspect_dir) as tmp:
        fileio.write_json(tmp / "report.json", report)
        fileio.write_text(tmp / "report.md", report_lib.to_markdown(report, rows))
        if cfg.inspect.html:
            fileio.write_text(tmp / "report.html", report_html.to_html(report, rows))
    return report


def benchmark(cfg: Any, layout: Layout) -> dict:
    from pipeline.bench import benchmark as bench_lib
    from pipeline.report import benchmark_report

    from pipeline.engine.verify import assert_loadable

    fp = read_fingerprint(layout)
    engine_dir = layout.engine_dir(fp["id"])
    manifest = assert_loadable(engine_dir, fp)
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


def run_all(cfg: Any, layout: Layout) -> dict:
    results = {}
    for name in ORDER:
        results[name] = globals()[name](cfg, layout)
    return results
