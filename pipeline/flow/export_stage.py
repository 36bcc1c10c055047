"""The export stage: the model's ONNX graph (exported from PyTorch, or the user's file
normalised) and its reference outputs, in artifacts/export."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.core import console, memory
from pipeline.core.layout import Layout
from pipeline.flow import output_folder

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.records.export_file import ExportRecord


def run(cfg: PipelineConfig, layout: Layout) -> ExportRecord:
    """The ONNX graph and its reference data, and the stage's table."""
    from pipeline.export import export
    from pipeline.flow import provenance

    peak = memory.StagePeak()
    with output_folder.writing(layout, layout.export_dir, stage="export"):
        model_sha256 = export.source_sha256(cfg.model)
        summary = export.export_model(cfg.model, cfg.profile, layout.export_dir)
        provenance.write(layout.export_dir, cfg, "export", model_sha256=model_sha256)
        rss = summary[memory.PEAK_KEY] = memory.record(layout.metrics_dir, "export", peak)
    console.table(
        f"export: {cfg.model.name}",
        [("graph", str(layout.export_graph)), memory.row(rss)],
    )
    return summary
