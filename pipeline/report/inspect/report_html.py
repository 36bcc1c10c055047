"""report.html: the inspect report as one self-contained page (inline CSS and SVG, no
scripts, no external assets), rendered from report.json alone through the Jinja2
templates in templates/ (autoescaped). This module only shapes what the templates
show; the page's markup lives in report.html.j2."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from pipeline.analysis.buildlog import SEVERITIES
from pipeline.core.numbers import fmt
from pipeline.records.calibration_file import FallbackRecord
from pipeline.records.inspect_file import (
    AttentionFusion,
    FallbackView,
    InspectRecord,
    MixedView,
    PrecisionTransformView,
)
from pipeline.report import templating
from pipeline.report.inspect import accuracy_view, mixed_view, precision_view
from pipeline.report.pictures import graph_picture


def _cards(r: InspectRecord) -> list[tuple[object, str]]:
    eng, log = r["engine"], r["build_log"]
    return [
        (r["precision"], "precision"),
        (f"{eng['backend']['flavour']} {eng['backend']['version']}", "TensorRT"),
        (templating.mib(eng["bytes"]), "engine size"),
        (f"{r['build_seconds']} s", "build time"),
        (
            f"{fmt(log['layers_original'])} → {fmt(log['layers_final'])}",
            "ONNX compute nodes → engine layers",
        ),
        (fmt(log["fusion_ratio"]), "fusion ratio (nodes per engine layer)"),
        *_attention_card(r["fusion"].get("attention")),
        (f"{log['peak_memory_mib']} MiB", "peak memory"),
        (len(log["warnings"]), "warnings"),
    ]


def _attention_card(fused: AttentionFusion | None) -> list[tuple[object, str]]:
    if not fused:
        return []
    return [(f"{fused['fused']} of {fused['softmax']}", "attention run as fused self-attention")]


def _optimizer_note(log: dict[str, Any]) -> str:
    """What the optimizer's own layer counts mean: on TensorRT-RTX (and wherever Myelin
    takes the whole graph) they fall to one region that holds every kernel."""
    opt = log.get("optimizer") or {}
    if not opt.get("regions") or opt.get("layers_after") != opt["regions"]:
        return ""
    return (
        f"The optimizer log reads {opt['layers_parsed']} → {opt['layers_after']} layers: "
        f"{opt['layers_after']} Myelin region{'s' if opt['regions'] > 1 else ''} (one compiled subgraph each) "
        f"took the whole network. That count is not the engine's layers; fusion here is measured against the "
        f"{fmt(log['layers_final'])} layers the engine lists."
    )


def _fusion_basis(log: dict[str, Any]) -> str:
    basis = log.get("fusion_basis")
    return f"Fusion ratio {fmt(log['fusion_ratio'])}: {basis}." if basis else ""


class MixedPage(MixedView):
    """precision=auto's view as the page shows it."""

    headline: str
    plan_headers: list[str]
    graph_headers: list[str]
    picture: str  # the Pareto front, inline SVG


def _mixed(transform: PrecisionTransformView | None) -> MixedPage | None:
    """precision=auto's view with its headline, tables' headers and Pareto picture."""
    v = transform.get("mixed") if transform else None
    if not v:
        return None
    return {
        **v,
        "headline": mixed_view.headline(v),
        "plan_headers": mixed_view.PLAN_HEADERS,
        "graph_headers": mixed_view.GRAPH_HEADERS,
        "picture": mixed_view.pareto_svg(v),
    }


class TransformContext(TypedDict):
    """What report.html.j2 shows of the precision transform (empty where there is none)."""

    reference_line: str
    standing_lines: list[str]
    fallback: FallbackView | FallbackRecord | None
    mixed: MixedPage | None
    group_headers: list[str]
    node_headers: list[str]
    step_headers: list[str]
    tensor_headers: list[str]
    quantization_lines: list[str]
    accuracy_headers: list[str]
    accuracy_rows: list[list[Any]]


def _transform_context(transform: PrecisionTransformView | None) -> TransformContext:
    """The template's view of the precision transform: its lines, tables and searches."""
    t: Mapping[str, Any] = transform or {}
    return {
        "reference_line": accuracy_view.reference_line(t)[2:] if transform else "",
        # report.md's lines on the verdict, the engine's standing and auto's answer
        "standing_lines": [
            line.strip()[2:].replace("**", "") for line in precision_view.standing_lines(t)
        ],
        "fallback": t.get("fallback"),
        "mixed": _mixed(transform),
        "group_headers": precision_view.GROUP_HEADERS,
        "node_headers": precision_view.NODE_HEADERS,
        "step_headers": precision_view.STEP_HEADERS,
        "tensor_headers": precision_view.TENSOR_HEADERS,
        "quantization_lines": [
            line[2:] for line in precision_view.quantization_lines(t.get("quantization"))
        ],
        "accuracy_headers": accuracy_view.HEADERS,
        "accuracy_rows": accuracy_view.rows(t["accuracy"]) if transform else [],
    }


def to_html(report: InspectRecord, max_rows: int = 400, use_dot: bool = True) -> str:
    eng, log, g = report["engine"], report["build_log"], report["graph"]
    passes = log["layer_passes"] or []
    top = max([p["layers"] for p in passes] + [1])
    exp, built = report["model"]["exported"], report["model"]["built"]
    ops = sorted(
        set(exp["ops"]) | set(built["ops"]),
        key=lambda o: (-(exp["ops"].get(o, 0) + built["ops"].get(o, 0)), o),
    )
    transform = report.get("precision_transform")
    eg = report.get("engine_graph")
    context = {
        "title": f"Engine report: {report['precision']} · {eng['backend']['flavour']} {eng['backend']['version']}",
        "eng": eng,
        "log": log,
        "graph": g,
        "network": report["network"],
        "fusion": report["fusion"],
        "exported": exp,
        "built": built,
        "transform": transform,
        "max_rows": max_rows,
        "cards": _cards(report),
        "optimizer_note": _optimizer_note(log),
        "fusion_basis": _fusion_basis(log),
        "precisions": list(dict.fromkeys(n["precision"] for n in g["nodes"] if n.get("precision"))),
        "main_picture": graph_picture.draw(g, "onnx-graph", use_dot),
        "detail_pictures": [
            {"title": d["title"], **graph_picture.draw(d, f"detail-{i}", use_dot)}
            for i, d in enumerate(g["details"])
        ],
        "engine_picture": graph_picture.draw(eg, "engine-graph", use_dot)
        if eg and eg["nodes"]
        else None,
        **_transform_context(transform),
        "engine_counts": templating.ranked(eng["precisions"]),
        "network_counts": templating.ranked(report["network"]["precisions"]),
        "fusion_rows": report["fusion"]["rows"][:max_rows],
        "layer_rows": eng["layers"][:max_rows],
        "io_rows": [[t["name"], t.get("mode"), t["dtype"], t["shape"]] for t in eng["io_tensors"]],
        "severity_rows": [[k, log["counts"].get(k, 0)] for k in SEVERITIES],
        "memory_rows": [[k, fmt(v)] for k, v in sorted(log["memory"].items())]
        + [["peak memory (MiB)", log["peak_memory_mib"]]],
        "passes": [{**p, "bar": f"{max(1, 160 * p['layers'] / top):.0f}"} for p in passes],
        "op_rows": [[op, exp["ops"].get(op, 0), built["ops"].get(op, 0)] for op in ops],
    }
    return templating.render("report.html.j2", **context)
