"""export.json, the export stage's record of the graph it wrote: where it came from, its
inputs and outputs, the sample layout calibration batches by, and where the reference
inputs came from. Written and read here only (see core/json_record.py)."""

# No `from __future__ import annotations`: the TypedDicts' Required[] are evaluated at class
# creation, as the reader's field check needs.
from pathlib import Path
from typing import Any, Required, TypedDict

from pipeline.core.calibration_file import InputSpec
from pipeline.core.json_record import JsonRecord
from pipeline.core.layout import EXPORT_SUMMARY


class SampleAxes(TypedDict):
    shapes: dict[str, list[int]]  # input -> one sample's shape (the profile's opt dims)
    axes: dict[str, int | None]  # input -> the axis samples stack on; None: not batched


class ExportSummary(TypedDict, total=False):
    source: Required[str]  # "factory:<name>" or "onnx:<file name>"
    onnx_sha256: Required[str]
    inputs: Required[list[InputSpec]]
    outputs: Required[list[InputSpec]]
    opset: int
    parameters: int
    nodes: int
    reference_batches: int
    samples: SampleAxes
    reference: dict[str, Any]  # where the reference inputs came from; "random": bool
    normalized: list[str]  # what normalising the user's file changed
    peak_rss_mib: float  # the stage's return only


RECORD = JsonRecord("export summary", "the export stage", ExportSummary)


def write(folder: Path, summary: ExportSummary) -> Path:
    return RECORD.write(folder / EXPORT_SUMMARY, summary)


def read(folder: Path) -> ExportSummary:
    return RECORD.read(folder / EXPORT_SUMMARY)
