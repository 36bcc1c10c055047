"""report.json, the inspect stage's record of what TensorRT made of the graph (written by
pipeline/flow/inspect_stage.py from pipeline/report/inspect/report.py's data). `trt-pipeline diff`
reads it back, from a folder or from a DVC experiment, through the one checked reader
here; the fields below are those its readers rely on. The sections' own types (engine
layers, graph pictures, the precision view) are here too, since the record names them."""

# No `from __future__ import annotations`: the TypedDicts' Required[] are evaluated at class
# creation, as the reader's field check needs (see core/json_record.py).
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NotRequired, Required, TypedDict

from pipeline.core.json_record import JsonRecord
from pipeline.records.calibration_file import EnginesRecord, FallbackRecord, InputSpec


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


class AttentionFusion(TypedDict):
    """The graph's attention that TensorRT runs as self-attention (analysis/attention.py)."""

    softmax: int  # attention Softmax nodes in the built graph (a Softmax a MatMul reads)
    fused: int  # of them, found part of a self-attention pattern by the builder
    unfused: list[str]  # the first 20 that were not


class FusionTable(TypedDict):
    """Which ONNX nodes each engine layer computes (report/inspect/report.fusion_table)."""

    source: str  # where the mapping came from, or why there is none
    rows: list[FusionRow]
    onnx_nodes_mapped: int
    onnx_nodes_live: int  # the nodes that run: constants and what they alone feed go
    unmapped: list[str]  # live nodes in no engine layer (folded or removed)
    attention: NotRequired[AttentionFusion | None]  # None: no attention in the graph


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


class Int4View(TypedDict):
    """int4 weight-only quantization as the report shows it."""

    method: str | None
    block_size: int | None
    gemms: int  # GEMMs holding int4 weights
    tables: int  # embedding tables in int4 too
    share: float | None  # of the GEMM weights
    bytes: dict[str, int]  # GEMM weight bytes by type


class SmoothingView(TypedDict):
    """The activation smoothing before int8/fp8 quantization, as the report shows it."""

    mode: str | None
    alpha: float | None
    groups: int
    folded: int  # groups folded into their LayerNorm
    note: str | None


class QuantizationView(TypedDict):
    """The report's view of a quantized graph (int8/fp8, or int4 weight-only)."""

    mode: str
    placement: str | None
    weights: int  # quantized weight tensors
    activations: list[list[str]]  # tensor, quantized readers, unquantized readers
    quantized_fraction: float | None  # of the GEMM FLOPs
    gemm_flops: int | None
    int4: Int4View | None
    smoothing: SmoothingView | None


class FallbackView(TypedDict):
    """precision.fallback=auto's search where it was needed, as the report's tables show
    it (report/inspect/precision_view.py)."""

    needed: bool
    placement: str | None
    kept: list[str]  # every node kept out of the low type, most sensitive first
    kept_fp32: list[str]
    kept_fp16: list[str]
    kept_int8: list[str]
    quantized_matmuls: int
    matmuls_still_quantized: int
    quantized_gemms: int  # a record of an older search: its matrix multiplies' counts
    gemms_still_quantized: int
    gemms_by_op: dict[str, dict[str, int]]
    graphs_evaluated: int
    plain: dict[str, Any]  # the plain graph's judgement: why a search was needed
    cache_hit: bool | None
    groups: list[list[Any]]  # group, nodes, sensitivity, result: a table's rows
    nodes: list[list[Any]]  # node, op, sensitivity, result
    steps: list[list[Any]]  # step, group or how many kept, score, gate


class MixedView(TypedDict):
    """precision=auto's search as the report shows it (report/inspect/mixed_view.py)."""

    types: list[str]  # the types the search chose among
    counts: dict[str, int]  # type -> GEMMs, the types chosen only
    candidates: int  # GEMMs searched
    weight_bytes: int
    fp32_weight_bytes: int
    graphs_judged: int
    search_cache_hit: bool  # the choice itself from the cache: no graph judged
    figures_cache_hit: bool
    seconds: float
    plan: list[list[Any]]  # per GEMM: node, op, type, weight bytes, of fp32, why
    graphs: list[list[Any]]  # per graph judged: name, weight bytes, score, gate, front
    pareto: list[dict[str, Any]]  # the front's points (precision/mixed/record.GraphPoint)


class AnswerView(TypedDict):
    """precision=auto's answer where it is not the mix it searched (fp16), and why."""

    answer: str
    why: str


class PrecisionTransformView(TypedDict):
    """report.json's `precision_transform`: what calibration.json says the calibrate stage
    did to the graph, and on which data (report/inspect/precision_view.py); a report that
    hid random calibration data or a fallback would not be honest."""

    precision: str | None
    transform: str | None
    accuracy: dict[str, dict[str, Any]]  # output -> metric -> figure, against fp32
    gate_passed: bool
    held_out_batches: int | None
    evaluated_with: str | None
    calibration_data: dict[str, Any] | None  # the data's source, samples, randomness, ...
    calibration_cache_hit: bool | None
    reference: dict[str, Any] | None
    reference_overlap: dict[str, Any] | None
    # the search's view where it was needed; the record as written where it was not
    fallback: FallbackView | FallbackRecord | None
    mixed: MixedView | None
    answer: AnswerView | None
    quantization: QuantizationView | None
    holdout: dict[str, Any] | None
    search_accuracy: list[list[Any]] | None  # subject, metric, value, threshold, verdict
    engines: EnginesRecord | None
    # The engine against the fp16 and fp32 engines (flow/engine_standing.Standing): the
    # inspect stage adds it, and records may not import flow's type.
    standing: NotRequired[Mapping[str, Any]]


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
    precision_transform: PrecisionTransformView  # what calibration.json says, for a person
    peak_rss_mib: float  # the stage's return only


NAME = "report.json"
RECORD = JsonRecord("inspect report", "the inspect stage", InspectRecord)


def write(folder: Path, report: InspectRecord) -> Path:
    return RECORD.write(folder / NAME, report)


def read(folder: Path) -> InspectRecord:
    return RECORD.read(folder / NAME)
