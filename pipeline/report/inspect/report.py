"""What went into the engine and what TensorRT did with it, as
report.json (for tools), report.md (for people) and report.html (report_html.py).

Engine layers come from the best source there is: the EngineInspector on a GPU that
can load the engine, else the ProfilingVerbosity.DETAILED dump in the build log, else
the log's `Engine Layer Information` lines (a Myelin region and its I/O only)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.analysis import attention, buildlog, engine_layers, node_precision
from pipeline.analysis.buildlog import BuildLogSummary
from pipeline.core import fileio
from pipeline.core.config import InspectConfig
from pipeline.core.errors import PipelineError
from pipeline.engine import manifest
from pipeline.graph import onnx_model
from pipeline.records.inspect_file import (
    EngineLayer,
    EngineSection,
    FusionRow,
    FusionTable,
    InspectorSummary,
    InspectRecord,
    IoTensor,
    NetworkSection,
    OnnxSummary,
)
from pipeline.report.inspect import report_graph

if TYPE_CHECKING:
    import onnx

    from pipeline.analysis.engine_inspector import EngineInspection
    from pipeline.records.build_file import Manifest

LOG_KEYS = (
    "counts",
    "warnings",
    "errors",
    "phases",
    "layer_passes",
    "layers_original",
    "layers_final",
    "fusion_ratio",
    "fusion_basis",
    "optimizer",
    "memory",
    "layer_memory",
    "peak_memory_mib",
    "timing_cache",
    "fusion_event_count",
)


def onnx_summary(path: Path, model: onnx.ModelProto | None = None) -> OnnxSummary:
    model = model if model is not None else onnx_model.load(path, check=False, weights=False)
    return {
        "opset": onnx_model.opset(model),
        "nodes": len(model.graph.node),
        "parameters": onnx_model.parameter_count(model),
        "ops": onnx_model.op_histogram(model),
        "inputs": [
            {"name": s.name, "dtype": s.dtype, "dims": list(s.dims)}
            for s in onnx_model.inputs(model)
        ],
        "outputs": [
            {"name": s.name, "dtype": s.dtype, "dims": list(s.dims)}
            for s in onnx_model.outputs(model)
        ],
    }


def _onnx_dtypes(model: onnx.ModelProto) -> dict[str, str]:
    import onnx

    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference is a nicety here; the node list is what matters
        pass
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.output) + list(model.graph.input):
        name = onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type).lower()
        out[vi.name] = "fp8" if name.startswith("float8") else engine_layers.dtype(name)
    return out


def layers_of_engine(
    summary: BuildLogSummary, inspection: EngineInspection | None
) -> tuple[list[EngineLayer], list[IoTensor], str, bool]:
    """(layers, I/O tensors, where they came from, whether they are the engine's real layers)."""
    if inspection and inspection.get("available"):
        where = f"engine inspector on the GPU, {inspection['layout']}"
        return inspection["layers"], inspection["io_tensors"], where, True
    plan = summary.get("engine_plan")
    if plan and plan.get("layers"):
        return plan["layers"], plan.get("io_tensors", []), plan["source"], True
    return (
        summary.get("engine_layers", []),
        [],
        "build log (Engine Layer Information: regions and their I/O)",
        False,
    )


def fusion_table(
    layers: list[EngineLayer], detailed: bool, summary: BuildLogSummary, live_onnx: list[str]
) -> FusionTable:
    rows: list[FusionRow] = [
        {
            "engine_layer": l["name"],
            "type": l["type"],
            "precision": l["precision"],
            "onnx_nodes": l["onnx_nodes"],
        }
        for l in layers
        if l["onnx_nodes"]
    ]
    source = "engine layers' metadata" if detailed else "ForeignNode metadata in the build log"
    if not rows:
        prec = {l["name"]: l["precision"] for l in layers}
        rows = [
            {
                "engine_layer": f["layer"],
                "type": "ForeignNode",
                "precision": prec.get(f["layer"], "unknown"),
                "onnx_nodes": f["onnx_nodes"],
            }
            for f in summary.get("fused_layers", [])
        ]
    mapped = {n for r in rows for n in r["onnx_nodes"]}
    unmapped = [n for n in live_onnx if n not in mapped]
    return {
        "source": source if rows else "none: the build log names no ONNX layers",
        "rows": rows,
        "onnx_nodes_mapped": len(mapped),
        "onnx_nodes_live": len(live_onnx),
        "unmapped": unmapped,
    }


def make_report(
    export_onnx: Path,
    built_onnx: Path,
    engine_dir: Path,
    inspect_cfg: InspectConfig,
    inspection: EngineInspection | None = None,
) -> InspectRecord:
    record, network, summary = _read_build(engine_dir)
    built_model = onnx_model.load(built_onnx, check=False, weights=False)
    network = [{**l, "precision": engine_layers.network_precision(l)} for l in network]
    dtype_hist = _output_dtypes(network)
    layers, io_tensors, source, detailed = layers_of_engine(summary, inspection)
    live = [n.name for n in report_graph.live_nodes(built_model)]
    precision_of = node_precision.resolver(
        {n.name: n.op_type for n in built_model.graph.node},
        layers,
        detailed,
        {l["name"]: l["precision"] for l in network},
        summary.get("onnx_nodes") or {},
        _onnx_dtypes(built_model),
    )
    max_nodes = int(inspect_cfg.graph_max_nodes)
    inspector = _inspector_summary(inspection)
    return {
        "model": {
            "exported": onnx_summary(export_onnx),
            "built": onnx_summary(built_onnx, built_model),
        },
        "network": _network_section(network, dtype_hist, inspect_cfg),
        "engine": _engine_section(record, layers, io_tensors, source, detailed, inspector),
        "fusion": {
            **fusion_table(layers, detailed, summary, live),
            "attention": attention.measure(
                attention.attention_softmax(built_model), summary.get("attention_found") or []
            ),
        },
        "build_log": {k: summary.get(k) for k in LOG_KEYS},
        "build_seconds": record["build_seconds"],
        "precision": record["config"]["precision"]["name"],
        "graph": report_graph.onnx_graph(built_model, precision_of, max_nodes),
        "engine_graph": report_graph.engine_graph(layers, io_tensors, max_nodes)
        if detailed
        else None,
    }


def _read_build(engine_dir: Path) -> tuple[Manifest, list[dict[str, Any]], BuildLogSummary]:
    """The build's manifest, network dump and log summary."""
    if not (engine_dir / "manifest.json").exists():
        raise PipelineError(f"no build for this machine in {engine_dir}; run the build stage first")
    record = manifest.load(engine_dir)
    network = fileio.read_json(engine_dir / "network.json", "network dump")
    summary = buildlog.load_summary(engine_dir)
    return record, network, summary


def _output_dtypes(network: list[dict[str, Any]]) -> dict[str, int]:
    """How many of the network's layer outputs are of each data type."""
    dtype_hist: dict[str, int] = {}
    for layer in network:
        for out in layer["outputs"]:
            dtype_hist[out["dtype"]] = dtype_hist.get(out["dtype"], 0) + 1
    return dtype_hist


def _inspector_summary(inspection: EngineInspection | None) -> InspectorSummary:
    """What the EngineInspector reported, less the layers and tensors the report holds anyway."""
    if not inspection:
        return {"available": False, "reason": "not attempted"}
    summary = inspection.copy()
    summary.pop("layers", None)
    summary.pop("io_tensors", None)
    return summary


def _network_section(
    network: list[dict[str, Any]], dtype_hist: dict[str, int], inspect_cfg: InspectConfig
) -> NetworkSection:
    return {
        "layers": network if inspect_cfg.network_layers else [],
        "layer_count": len(network),
        "output_dtypes": dtype_hist,
        "precisions": engine_layers.histogram(network),
    }


def _engine_section(
    record: Manifest,
    layers: list[EngineLayer],
    io_tensors: list[IoTensor],
    source: str,
    detailed: bool,
    inspector: InspectorSummary,
) -> EngineSection:
    return {
        **record["engine"],
        "backend": record["backend"],
        "fingerprint": record["fingerprint"]["id"],
        "target": record["fingerprint"]["target"],
        "layers_source": source,
        "layers_detailed": detailed,
        "layers": layers,
        "io_tensors": io_tensors,
        "precisions": engine_layers.histogram(layers) if layers else {},
        "inspector": inspector,
    }
