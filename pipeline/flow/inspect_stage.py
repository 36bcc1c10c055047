"""The inspect stage's work, under the output lock pipeline.flow.stages takes: the report
of what TensorRT made of the graph. Its own module, so that only this stage lists its
imports (analysis, report) as code deps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.core import console, fileio, memory
from pipeline.core.layout import Layout
from pipeline.records import calibration_file, inspect_file
from pipeline.records.fingerprint_file import FingerprintRecord
from pipeline.records.inspect_file import InspectRecord

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig


def run(
    cfg: PipelineConfig, layout: Layout, fp: FingerprintRecord, peak: memory.StagePeak
) -> InspectRecord:
    from pipeline.analysis import engine_inspector
    from pipeline.flow import engine_standing, upstream
    from pipeline.report.inspect import mixed_view, precision_view, report_html, report_markdown
    from pipeline.report.inspect.report import make_report

    engine_dir = layout.engine_dir(fp["id"])
    manifest = upstream.current(cfg, layout, fp)
    inspection = (
        engine_inspector.inspect(engine_dir / "engine.plan", fp)
        if cfg.inspect.engine_inspector
        else {"available": False, "reason": "switched off (inspect.engine_inspector=false)"}
    )
    report = make_report(
        layout.export_graph,
        layout.calibrated_graph,
        engine_dir,
        cfg.inspect,
        inspection,
    )
    report["precision_transform"] = precision_view.precision_transform(
        calibration_file.read(layout.calibration_summary)
    )
    # the engine against the fp16 and fp32 engines of the same graph (build's table says it too)
    report["precision_transform"]["standing"] = engine_standing.standing(cfg, layout, manifest)
    precision_view.mark_kept_nodes(report)
    rows = int(cfg.inspect.max_table_rows)
    with fileio.staged_dir(layout.inspect_dir) as tmp:
        fileio.write_text(tmp / "report.md", report_markdown.to_markdown(report, rows))
        if mixed := report["precision_transform"].get("mixed"):
            fileio.write_text(tmp / mixed_view.PICTURE, mixed_view.pareto_svg(mixed))
        if cfg.inspect.html:
            fileio.write_text(tmp / "report.html", report_html.to_html(report, rows))
        inspect_file.write(tmp, report)
        # last, so the pages' rendering counts in the peak
        report[memory.PEAK_KEY] = memory.record(layout.metrics_dir, "inspect", peak)
    page = "report.html" if cfg.inspect.html else "report.md"
    shown = [("report", str(layout.inspect_dir / page)), memory.row(report[memory.PEAK_KEY])]
    console.table(f"inspect: {cfg.model.name}", shown)
    return report
