"""report.md: the report for people, in Markdown (report.html is report_html.py)."""

from __future__ import annotations

from typing import Any

from pipeline.analysis import attention
from pipeline.core import tables
from pipeline.records.calibration_file import InputSpec
from pipeline.records.inspect_file import EngineSection, FusionTable, InspectRecord, OnnxSummary
from pipeline.report.inspect import precision_view
from pipeline.report.templating import first


def _optimizer_line(opt: dict[str, Any]) -> list[str]:
    if not opt.get("layers_parsed"):
        return []
    regions = (
        f"; {opt['regions']} Myelin region(s), each compiled into many kernels"
        if opt.get("regions")
        else ""
    )
    return [
        f"- optimizer log: {opt['layers_parsed']} network layers → {opt['layers_after']}{regions}"
    ]


def to_markdown(report: InspectRecord, max_rows: int) -> str:
    """The report's sections in order, each from its own function."""
    md = [
        *_summary(report),
        *(
            precision_view.transform_markdown(report["precision_transform"])
            if report.get("precision_transform")
            else []
        ),
        *_onnx_model(report["model"]["exported"], report["model"]["built"]),
        *_precision(report),
        *_build_log(report["build_log"]),
        *_fusions(report["fusion"], max_rows),
        *_engine_layers(report["engine"], max_rows),
        *_network(report["network"]["layers"], max_rows),
    ]
    return "\n".join(md) + "\n"


def _summary(report: InspectRecord) -> list[str]:
    eng, log, insp = report["engine"], report["build_log"], report["engine"]["inspector"]
    inspector = (
        f"available ({insp.get('layout')})"
        if insp.get("available")
        else f"absent: {insp.get('reason')}"
    )
    return [
        f"# Engine report: {report['precision']}",
        "",
        f"- backend: {eng['backend']['flavour']} {eng['backend']['version']}",
        f"- target: {eng['target']} (fingerprint `{eng['fingerprint']}`)",
        f"- engine: {eng['bytes']:,} bytes, sha256 `{eng['sha256'][:16]}…`, built in {report['build_seconds']} s",
        f"- fusion ratio {log['fusion_ratio']}: {log.get('fusion_basis')}",
        *([f"- {attention.line(fused)}"] if (fused := report["fusion"].get("attention")) else []),
        *_optimizer_line(log.get("optimizer") or {}),
        f"- peak memory: {log['peak_memory_mib']} MiB; warnings: {len(log['warnings'])}",
        f"- engine layers from: {eng['layers_source']}",
        f"- engine inspector: {inspector}",
        "",
    ]


def _tensors(specs: list[InputSpec]) -> str:
    return "; ".join(f"{t['name']} {t['dtype']}{t['dims']}" for t in specs)


def _onnx_model(exp: OnnxSummary, built: OnnxSummary) -> list[str]:
    ops = sorted(
        set(exp["ops"]) | set(built["ops"]),
        key=lambda o: (-(exp["ops"].get(o, 0) + built["ops"].get(o, 0)), o),
    )
    return [
        "## ONNX model",
        "",
        tables.markdown(
            ["", "exported", "built"],
            [
                ["opset", exp["opset"], built["opset"]],
                ["nodes", exp["nodes"], built["nodes"]],
                ["parameters", f"{exp['parameters']:,}", f"{built['parameters']:,}"],
                ["inputs", _tensors(exp["inputs"]), _tensors(built["inputs"])],
                ["outputs", _tensors(exp["outputs"]), _tensors(built["outputs"])],
            ],
        ),
        "",
        tables.markdown(
            ["op", "exported", "built"],
            [[op, exp["ops"].get(op, 0), built["ops"].get(op, 0)] for op in ops],
        ),
        "",
    ]


def _precision(report: InspectRecord) -> list[str]:
    engine, network = report["engine"]["precisions"], report["network"]["precisions"]
    return [
        "## Precision",
        "",
        tables.markdown(
            ["precision", "engine layers", "network layers"],
            [
                [p, engine.get(p, 0), network.get(p, 0)]
                for p in dict.fromkeys(list(engine) + list(network))
            ],
        ),
        "",
    ]


def _build_log(log: dict[str, Any]) -> list[str]:
    md = [
        "## Build log",
        "",
        tables.markdown(["severity", "count"], [[k, v] for k, v in log["counts"].items()]),
        "",
    ]
    if log["memory"]:
        rows = [[k, f"{v:,}"] for k, v in log["memory"].items()]
        md += [tables.markdown(["memory", "value"], rows), ""]
    if log["layer_passes"]:
        rows = [[p["pass"], p["layers"]] for p in log["layer_passes"]]
        md += [tables.markdown(["optimizer pass", "layers"], rows), ""]
    if log["timing_cache"]:
        md += ["### Timing cache", ""] + [f"- {t}" for t in log["timing_cache"]] + [""]
    return md + ["### Warnings", ""] + ([f"- {w}" for w in log["warnings"]] or ["none"]) + [""]


def _fusions(fusion: FusionTable, max_rows: int) -> list[str]:
    md = [
        "## Fusions",
        "",
        f"From the {fusion['source']}: {fusion['onnx_nodes_mapped']} of "
        f"{fusion['onnx_nodes_live']} running ONNX nodes mapped to engine layers.",
        "",
    ]
    if fusion["rows"]:
        rows = [
            [
                r["engine_layer"],
                r["type"],
                r["precision"],
                f"{len(r['onnx_nodes'])}: {first(r['onnx_nodes'], 6)}",
            ]
            for r in fusion["rows"][:max_rows]
        ]
        md += [tables.markdown(["engine layer", "type", "precision", "ONNX nodes"], rows), ""]
    if fusion["unmapped"]:
        unmapped = first(fusion["unmapped"], 20)
        md += [f"ONNX nodes in no engine layer (folded or removed): {unmapped}", ""]
    return md


def _engine_layers(eng: EngineSection, max_rows: int) -> list[str]:
    if not eng["layers"]:
        return []
    rows = [
        [l["name"], l["type"], l["precision"], l["tactic"], first(l["onnx_nodes"], 3)]
        for l in eng["layers"][:max_rows]
    ]
    headers = ["name", "type", "precision", "tactic", "ONNX nodes"]
    return [f"## Engine layers ({eng['layers_source']})", "", tables.markdown(headers, rows), ""]


def _network(layers: list[dict[str, Any]], max_rows: int) -> list[str]:
    if not layers:
        return []
    rows = [
        [
            l["index"],
            l["name"],
            l["type"],
            l["precision"],
            "; ".join(f"{o['dtype']}{o['shape']}" for o in l["outputs"]),
        ]
        for l in layers[:max_rows]
    ]
    md = [
        "## TensorRT network after parsing",
        "",
        tables.markdown(["#", "layer", "type", "precision", "outputs"], rows),
    ]
    if len(layers) > max_rows:
        md.append(f"\n… {len(layers) - max_rows} more layers in report.json")
    return md
