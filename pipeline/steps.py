"""One function per pipeline stage. DVC stages (stages/*.py) and the Hydra sweep
(pipeline/run.py) both call these, so they share one code path and one store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import config as config_lib, fileio
from pipeline.errors import PipelineError
from pipeline.layout import Layout


def fingerprint(cfg: Any, layout: Layout) -> dict:
    from pipeline import fingerprint as fp_lib

    fp = fp_lib.collect(cfg.build)
    fileio.write_json(layout.fingerprint, fp)
    return fp


def read_fingerprint(layout: Layout) -> dict:
    return fileio.read_json(layout.fingerprint, "fingerprint (run the fingerprint stage)")


def export(cfg: Any, layout: Layout) -> dict:
    from pipeline import export as export_lib

    return export_lib.export_model(cfg.model, layout.export_dir)


def calibrate(cfg: Any, layout: Layout) -> dict:
    from pipeline import precision

    return precision.transform(layout.export_dir, layout.calibrate_dir, cfg.precision, cfg.calibration, cfg.model)


def build(cfg: Any, layout: Layout, progress: bool = True) -> dict:
    from pipeline import build as build_lib, buildlog, manifest as manifest_lib

    fp = read_fingerprint(layout)
    onnx_path = layout.calibrate_dir / "model.onnx"
    if not onnx_path.exists():
        raise PipelineError(f"{onnx_path} not found; run the calibrate stage first")
    resolved = build_lib.resolve_profiles(cfg.profile, onnx_path)
    result = build_lib.build_engine(onnx_path, cfg.precision, cfg.build, resolved, fp["trt_flavour"], progress)
    summary = buildlog.summarize(result.records)
    inputs = {
        "onnx_sha256": fileio.sha256_file(onnx_path),
        "calibration_sha256": fileio.sha256_file(layout.calibrate_dir / "calibration.json"),
        "plugins_sha256": {Path(p).name: fileio.sha256_file(p) for p in cfg.build.plugins},
    }
    manifest = manifest_lib.make(
        fingerprint=fp, inputs=inputs, build_cfg=config_lib.to_dict(cfg.build),
        precision_cfg=config_lib.to_dict(cfg.precision), profiles=resolved, result=result, summary=summary,
        engine_sha256=fileio.sha256_bytes(result.engine))
    with fileio.staged_dir(layout.build_dir) as tmp:
        out = tmp / fp["id"]
        fileio.write_bytes(out / "engine.plan", result.engine)
        fileio.write_text(out / "build.log", buildlog.format_log(result.records))
        fileio.write_json(out / "network.json", result.network)
        fileio.write_json(out / "build_summary.json", summary)
        fileio.write_json(out / "manifest.json", manifest)
    return manifest


def inspect(cfg: Any, layout: Layout) -> dict:
    from pipeline import report as report_lib

    fp = read_fingerprint(layout)
    report = report_lib.make_report(layout.export_dir / "model.onnx", layout.calibrate_dir / "model.onnx",
                                    layout.engine_dir(fp["id"]), cfg.inspect)
    with fileio.staged_dir(layout.inspect_dir) as tmp:
        fileio.write_json(tmp / "report.json", report)
        fileio.write_text(tmp / "report.md", report_lib.to_markdown(report, int(cfg.inspect.max_table_rows)))
    return report


def benchmark(cfg: Any, layout: Layout) -> dict:
    from pipeline import benchmark as bench_lib

    fp = read_fingerprint(layout)
    engine_dir = layout.engine_dir(fp["id"])
    manifest = fileio.read_json(engine_dir / "manifest.json", "build manifest (run the build stage)")
    profile = manifest["config"]["profiles"][0]
    metrics = bench_lib.run(cfg.model, cfg.benchmark, profile, layout.export_dir / "model.onnx",
                            engine_dir / "engine.plan", fp)
    metrics["precision"] = cfg.precision.name
    metrics["model"] = cfg.model.name
    fileio.write_json(layout.metrics_dir / "benchmark.json", metrics)
    return metrics


ORDER = ("fingerprint", "export", "calibrate", "build", "inspect", "benchmark")


def run_all(cfg: Any, layout: Layout) -> dict:
    results = {}
    for name in ORDER:
        results[name] = globals()[name](cfg, layout)
    return results
