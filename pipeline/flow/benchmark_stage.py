"""The benchmark stage's work, under the output lock pipeline.flow.stages takes: every
backend timed, the metrics files, charts and summary written. Its own module, so that only
this stage lists its imports (bench, report) as code deps."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core import console, fileio, memory, metrics_files
from pipeline.core.layout import Layout
from pipeline.records import summary_file
from pipeline.records.fingerprint_file import FingerprintRecord

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.records.benchmark_file import BenchmarkRecord


def run(
    cfg: PipelineConfig, layout: Layout, fp: FingerprintRecord, peak: memory.StagePeak
) -> BenchmarkRecord:
    from pipeline.bench import benchmark
    from pipeline.flow import engine_standing, upstream
    from pipeline.report.benchmark import benchmark_report, headline

    engine_dir = layout.engine_dir(fp["id"])
    manifest = upstream.current(cfg, layout, fp)
    paths = {
        "export": layout.export_graph,
        "calibrated": layout.calibrated_graph,
        "engine": engine_dir / "engine.plan",
        "reference": layout.reference,
    }
    metrics = benchmark.run(cfg, manifest["config"]["profiles"], paths, fp)
    metrics["precision"] = cfg.precision.name
    metrics["model"] = cfg.model.name
    out = layout.metrics_dir
    fileio.write_json(out / "benchmark.json", metrics)
    fileio.write_text(out / "benchmark.md", benchmark_report.to_markdown(metrics))
    _write_charts(out, metrics, f"{cfg.model.name}, {cfg.precision.name}, {fp['id']}")
    # The one DVC metrics file: upstream stages' detail files are this stage's deps.
    summary_file.write(
        out,
        headline.summarize(
            metrics_files.read_accuracy(layout.accuracy_metrics),
            metrics_files.read_gates(layout.gates_metrics),
            manifest,
            metrics,
            engine_standing.standing(cfg, layout, manifest).get("against"),
            engine_standing.per_parameter(cfg, layout, manifest),
        ),
    )
    metrics[memory.PEAK_KEY] = memory.record(out, "benchmark", peak)
    console.table(
        f"benchmark: {cfg.model.name} {cfg.precision.name} ({metrics['headline']})",
        [
            *[
                (
                    k,
                    f"median {r['median_ms']:.4g} ms, p99 {r['p99_ms']:.4g} ms, {r['throughput_per_s']:.4g} samples/s (batch {r['batch']})"
                    if r["status"] == "ok"
                    else f"skipped: {r.get('reason', '')}",
                )
                for k, r in metrics["results"].items()
            ],
            *benchmark_report.decoder_rows(metrics),
            ("details", str(out / "benchmark.md")),
            memory.row(metrics[memory.PEAK_KEY]),
        ],
    )
    return metrics


def _write_charts(out: Path, metrics: BenchmarkRecord, subtitle: str) -> None:
    """The plot rows DVC draws and the static SVGs of the same figures."""
    from pipeline.report.benchmark import benchmark_report
    from pipeline.report.pictures import plots

    rows = benchmark_report.plot_rows(metrics)
    # DVC draws one plot per file, so latency and throughput each get one (same rows).
    fileio.write_json(out / "benchmark_latency.json", rows)
    fileio.write_json(out / "benchmark_throughput.json", rows)
    for kind in plots.CHARTS:
        fileio.write_text(out / f"benchmark_{kind}.svg", plots.svg(rows, kind, subtitle))
    phases = plots.phases_svg(metrics.get("decoder"), subtitle)
    fileio.write_text(out / "benchmark_phases.svg", phases)
