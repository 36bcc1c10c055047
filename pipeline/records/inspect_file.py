"""report.json, the inspect stage's record of what TensorRT made of the graph (written by
pipeline/flow/inspect_stage.py from pipeline/report/inspect/report.py's data). `trt-pipeline diff`
reads it back, from a folder or from a DVC experiment, through the one checked reader
here; the fields below are those its readers rely on."""

# No `from __future__ import annotations`: the TypedDicts' Required[] are evaluated at class
# creation, as the reader's field check needs (see core/json_record.py).
from pathlib import Path
from typing import Any, Required, TypedDict

from pipeline.core.json_record import JsonRecord


class Backend(TypedDict, total=False):
    flavour: Required[str]  # "tensorrt" or "tensorrt_rtx"
    version: Required[str]
    strongly_typed: bool
    weak_typing: dict[str, Any]  # TensorRT 10 weak typing: the builder flags it set


class EngineSection(TypedDict, total=False):
    """The engine as built (the manifest's engine fields) and as TensorRT reports its layers."""

    bytes: Required[int]
    backend: Required[Backend]
    file: str
    sha256: str
    stripped: bool
    refit_from: dict[str, str]
    fingerprint: str  # the fingerprint id
    target: str
    layers_source: str
    layers_detailed: bool
    layers: list[dict[str, Any]]
    io_tensors: list[dict[str, Any]]
    precisions: dict[str, int]
    inspector: dict[str, Any]


class NetworkSection(TypedDict, total=False):
    """The network TensorRT parsed, before fusion."""

    layers: Required[list[dict[str, Any]]]  # [] unless inspect.network_layers
    layer_count: int
    output_dtypes: dict[str, int]
    precisions: dict[str, int]


class InspectRecord(TypedDict, total=False):
    precision: Required[str]
    engine: Required[EngineSection]
    build_log: Required[dict[str, Any]]  # the log summary's LOG_KEYS
    network: Required[NetworkSection]
    model: dict[str, dict[str, Any]]  # "exported" and "built": op counts, inputs, outputs
    fusion: dict[str, Any]
    build_seconds: float
    graph: dict[str, Any]  # the ONNX graph picture's nodes and edges
    engine_graph: dict[str, Any] | None
    precision_transform: dict[str, Any]  # what calibration.json says, for a person
    peak_rss_mib: float  # the stage's return only


NAME = "report.json"
RECORD = JsonRecord("inspect report", "the inspect stage", InspectRecord)


def write(folder: Path, report: InspectRecord) -> Path:
    return RECORD.write(folder / NAME, report)


def read(folder: Path) -> InspectRecord:
    return RECORD.read(folder / NAME)
