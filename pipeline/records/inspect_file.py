"""report.json, the inspect stage's record of what TensorRT made of the graph (written by
pipeline/flow/inspect_stage.py from pipeline/report/inspect/report.py's data). `trt-pipeline diff`
reads it back, from a folder or from a DVC experiment, through the one checked reader
here; the fields below are those its readers rely on. The sections' own types (engine
layers, graph pictures) are here too, since the record names them."""

# No `from __future__ import annotations`: the TypedDicts' Required[] are evaluated at class
# creation, as the reader's field check needs (see core/json_record.py).
from pathlib import Path
from typing import Any, Required, TypedDict

from pipeline.core.json_record import JsonRecord
from pipeline.records.calibration_file import InputSpec


class Backend(TypedDict, total=False):
    flavour: Required[str]  # "tensorrt" or "tensorrt_rtx"
    version: Required[str]
    strongly_typed: bool
    weak_typing: dict[str, Any]  # TensorRT 10 weak typing: the builder flags it set


class LayerTensor(TypedDict):
    """An engine layer's input or output, as either TensorRT's inspector writes it."""

    name: str
    dtype: str  # one of DTYPES' names, or "unknown"
    shape: list[int]
    format: str


class EngineLayer(TypedDict):
    """One engine layer, whichever TensorRT's inspector layout it came in
    (analysis/engine_layers.py makes it)."""

    name: str
    type: str  # "" where the engine kept layer names only
    precision: str
    inputs: list[LayerTensor]
    outputs: list[LayerTensor]
    onnx_nodes: list[str]
    tactic: str | None


class IoTensor(TypedDict):
    """An engine input or output."""

    name: str
    mode: str | None  # "Input", "Output"; None where only names were kept
    dtype: str
    shape: list[int]


class InspectorSummary(TypedDict, total=False):
    """Whether TensorRT's EngineInspector read the engine (it needs a GPU that can load
    it), without the layers and tensors the engine section holds anyway."""

    available: Required[bool]
    reason: str  # why not, where it did not
    layout: str  # which TensorRT's JSON layout it read, where it did


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
    layers: list[EngineLayer]
    io_tensors: list[IoTensor]
    precisions: dict[str, int]
    inspector: InspectorSummary


class NetworkSection(TypedDict, total=False):
    """The network TensorRT parsed, before fusion."""

    layers: Required[list[dict[str, Any]]]  # [] unless inspect.network_layers
    layer_count: int
    output_dtypes: dict[str, int]
    precisions: dict[str, int]


class OnnxSummary(TypedDict):
    """A graph as the report sums it up (report/inspect/report.onnx_summary)."""

    opset: int
    nodes: int
    parameters: int
    ops: dict[str, int]  # op type -> nodes
    inputs: list[InputSpec]
    outputs: list[InputSpec]  # an output's name, dtype and dims, as an input's


class GraphSummaries(TypedDict):
    """report.json's `model`: the exported graph and the one the engine was built from."""

    exported: OnnxSummary
    built: OnnxSummary  # the calibrate stage's graph


class FusionRow(TypedDict):
    """An engine layer and the ONNX nodes fused into it."""

    engine_layer: str
    type: str  # "ForeignNode" where only the build log's region names them
    precision: str
    onnx_nodes: list[str]


class FusionTable(TypedDict):
    """Which ONNX nodes each engine layer computes (report/inspect/report.fusion_table)."""

    source: str  # where the mapping came from, or why there is none
    rows: list[FusionRow]
    onnx_nodes_mapped: int
    onnx_nodes_live: int  # the nodes that run: constants and what they alone feed go
    unmapped: list[str]  # live nodes in no engine layer (folded or removed)


class GraphNode(TypedDict, total=False):
    """A box of the report's graph pictures (report/inspect/report_graph.py makes them,
    report/pictures draws them)."""

    id: Required[str]
    label: Required[str]  # the op or layer type; a tensor's or a folded block's name
    kind: Required[str]  # "op", "group" or "io"
    tooltip: Required[str]
    name: str  # an op's node or engine layer name
    sublabel: str
    precision: str
    mix: dict[str, int]  # a folded block's nodes by precision, drawn as a stacked bar
    marked: bool  # kept out of the low type by precision.fallback: outlined


class NodesAndEdges(TypedDict):
    """What a picture draws: boxes, and the arrows between them by box id."""

    nodes: list[GraphNode]
    edges: list[tuple[str, str]]  # (from, to); each a list of two once read back from JSON


class FoldedBlock(TypedDict):
    """A numbered module repeated in the graph (`/layers.0`, `/layers.1`, ...), one box each."""

    family: str  # "/layers.#"
    instances: list[str]  # "/layers.0", ...
    nodes_each: list[int]


class GraphDetail(NodesAndEdges):
    """The inside of one folded block's first instance, drawn apart."""

    title: str


class Graph(NodesAndEdges):
    """A graph picture's data: report.json's `graph` (the ONNX graph) and `engine_graph`."""

    folded: list[FoldedBlock]
    details: list[GraphDetail]
    truncated: int  # boxes left out past inspect.graph_max_nodes


class InspectRecord(TypedDict, total=False):
    precision: Required[str]
    engine: Required[EngineSection]
    build_log: Required[dict[str, Any]]  # the log summary's LOG_KEYS
    network: Required[NetworkSection]
    model: GraphSummaries
    fusion: FusionTable
    build_seconds: float
    graph: Graph  # the ONNX graph picture's nodes and edges
    engine_graph: Graph | None
    precision_transform: dict[str, Any]  # what calibration.json says, for a person
    peak_rss_mib: float  # the stage's return only


NAME = "report.json"
RECORD = JsonRecord("inspect report", "the inspect stage", InspectRecord)


def write(folder: Path, report: InspectRecord) -> Path:
    return RECORD.write(folder / NAME, report)


def read(folder: Path) -> InspectRecord:
    return RECORD.read(folder / NAME)
