"""The report's precision view: what the calibrate stage did to the graph (transform,
calibration data, accuracy against fp32, the fallback search) as data for report.json
and as rows and lines for report.md and report.html."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core import tables
from pipeline.records import calibration_file
from pipeline.records.calibration_file import CalibrationRecord, FallbackRecord
from pipeline.records.inspect_file import (
    AnswerView,
    FallbackView,
    InspectRecord,
    Int4View,
    PrecisionTransformView,
    QuantizationView,
)
from pipeline.report.inspect import accuracy_view, mixed_view


def precision_transform(calibration: CalibrationRecord) -> PrecisionTransformView:
    """What the calibrate stage did to the graph, and on which data: a report that
    hides random calibration data or a fallback would not be honest."""
    calib = calibration.get("calibration") or {}
    data = calib.get("data") or {}
    return {
        "precision": calibration.get("precision"),
        "transform": calibration.get("transform"),
        "accuracy": calibration.get("accuracy", {}),
        "gate_passed": all(g.get("passed", True) for g in calibration.get("gate", [])),
        "held_out_batches": calibration.get("held_out_batches"),
        "evaluated_with": calibration.get("evaluated_with"),
        "calibration_data": {
            k: data[k]
            for k in ("source", "num_samples", "random", "note", "fallback", "path", "factory")
            if data.get(k) not in (None, "")
        }
        or None,
        "calibration_cache_hit": (calib.get("cache") or {}).get("hit"),
        "reference": calibration.get("reference"),
        "reference_overlap": calibration.get("reference_overlap"),
        "fallback": _fallback(calibration.get("fallback")),
        "mixed": mixed_view.view(calibration.get("mixed")),
        "answer": _answer(calibration.get("mixed")),
        "quantization": quantization(calib),
        "holdout": calibration.get("holdout"),
        "search_accuracy": _search_figures(calibration.get("search_judgement")),
        "engines": calibration.get("engines"),
    }


def _answer(mixed: dict[str, Any] | None) -> AnswerView | None:
    """precision=auto's answer where it is not the mix it searched (fp16), and why."""
    if not mixed or not mixed.get("answer"):
        return None
    return {"answer": mixed["answer"], "why": mixed.get("why", "")}


def _search_figures(search: dict[str, Any] | None) -> list[list[Any]] | None:
    """The search's own gated figures of the graph it chose, on its samples."""
    if not search:
        return None
    return [
        [r["subject"], r["metric"], r["value"], r["threshold"], "pass" if r["passed"] else "FAIL"]
        for r in search["gate"]
    ]


def standing_lines(t: Mapping[str, Any]) -> list[str]:
    """Where the graph and engine stand: the verdict on held-out samples beside the search's
    own figure, the engine against the fp16 and fp32 engines of the same graph, and
    precision=auto's answer where it is fp16. `t`: the transform view, or {} where none."""
    lines = []
    split = t.get("holdout")
    if split:
        lines.append(
            f"- verdict: the gate judged {split['verdict_samples']} held-out samples the search "
            f"never judged; the search judged {split['search_samples']}, "
            f"{split.get('margin', 0):g} inside each threshold"
            + (f" ({split['note']})" if split.get("note") else "")
        )
        for row in t.get("search_accuracy") or []:
            lines.append(
                f"  - search's own figure: {row[0]} {row[1]} {fmt_value(row[2])} (gate {row[3]})"
            )
    stand = t.get("standing") or {}
    if stand.get("against"):
        refs = stand["references"]
        text = ", ".join(
            f"{ratio:.2f}x the {k} engine ({refs[k]['bytes']:,} B)"
            for k, ratio in stand["against"].items()
        )
        how = stand.get("measured_with")
        lines.append(f"- engine: {text} of the same graph, settings and machine ({how})")
        if stand.get("larger"):
            lines.append(f"- **{stand['larger']}**")
    elif stand.get("note") and t.get("engines"):
        lines.append(f"- engine: {stand['note']}")
    if t.get("answer"):
        lines.append(f"- precision=auto answered {t['answer']['answer']}: {t['answer']['why']}")
    return lines


def fmt_value(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def quantization(calib: dict[str, Any]) -> QuantizationView | None:
    """int8/fp8: where the Q/DQ pairs are (tensors, who reads the quantized value), the
    smoothing, and the share of GEMM FLOPs that runs quantized."""
    if not calib.get("quantize_mode"):
        return None
    tensors = calib.get("quantized_tensors") or []
    flops = calib.get("gemm_flops") or {}
    smooth = calib.get("smoothing") or {}
    return {
        "mode": calib["quantize_mode"],
        "placement": calib.get("qdq_placement"),
        "weights": sum(1 for t in tensors if t["weight"]),
        "activations": [
            [
                t["tensor"],
                ", ".join(t["quantized_readers"]),
                ", ".join(t["unquantized_readers"]) or "-",
            ]
            for t in tensors
            if not t["weight"]
        ],
        "quantized_fraction": flops.get("quantized_fraction"),
        "gemm_flops": flops.get("gemm_flops"),
        "int4": _int4(calib),
        "smoothing": {
            "mode": smooth.get("mode"),
            "alpha": smooth.get("alpha"),
            "groups": len(smooth.get("groups", [])),
            "folded": sum(1 for g in smooth.get("groups", []) if g["folded_into_layer_norm"]),
            "note": smooth.get("note"),
        }
        if smooth
        else None,
    }


def _int4(calib: dict[str, Any]) -> Int4View | None:
    """int4 weight-only: the method, the block size, and which GEMMs hold int4 weights."""
    view = calib.get("int4")
    if calib.get("quantize_mode") != "int4" or not view:
        return None
    return {
        "method": calib.get("method"),
        "block_size": calib.get("block_size"),
        "gemms": len(view.get("int4_gemms", [])),
        "tables": len(view.get("int4_embedding_tables", [])),
        "share": view.get("int4_weight_share"),
        "bytes": view.get("gemm_weight_bytes", {}),
    }


def _fallback(fb: FallbackRecord | None) -> FallbackView | FallbackRecord | None:
    """precision.fallback=auto: the groups, the nodes inside the kept groups, the steps."""
    if not fb or not fb.get("needed"):
        return fb.copy() if fb is not None else None
    result = {True: "kept", False: "quantized"}
    return {
        "needed": True,
        "placement": fb.get("placement"),
        "kept": fb.get("kept", fb["kept_fp32"]),  # a record of an older search: all fp32
        "kept_fp32": fb["kept_fp32"],
        "kept_fp16": fb.get("kept_fp16", []),
        "kept_int8": fb.get("kept_int8", []),
        "quantized_matmuls": fb["quantized_matmuls"],
        "matmuls_still_quantized": fb["matmuls_still_quantized"],
        # records of an older search count matrix multiplies only
        "quantized_gemms": fb.get("quantized_gemms", fb["quantized_matmuls"]),
        "gemms_still_quantized": fb.get("gemms_still_quantized", fb["matmuls_still_quantized"]),
        "gemms_by_op": fb.get("gemms_by_op", {}),
        "graphs_evaluated": fb["graphs_evaluated"],
        "plain": fb["plain"],
        "cache_hit": (fb.get("cache") or {}).get("hit"),
        "groups": [
            [g["group"], len(g["nodes"]), g["sensitivity"], result[g["kept"]]] for g in fb["groups"]
        ],
        "nodes": [
            [
                r["node"],
                r["op_type"],
                r["sensitivity"],
                f"kept {calibration_file.kept_type(fb, r['node'])}" if r["kept"] else "quantized",
            ]
            for r in fb["nodes"]
        ],
        "steps": [
            [
                s["stage"],
                s.get("group", s.get("kept", "")),
                s["score"],
                "pass" if s["passed"] else "fail",
            ]
            for s in fb["steps"]
        ],
    }


GROUP_HEADERS = [
    "group (one role in every layer)",
    "nodes",
    "sensitivity (gate score added when quantized alone)",
    "result",
]
NODE_HEADERS = [
    "node (in the kept groups)",
    "op",
    "sensitivity (gate score added when quantized alone)",
    "result",
]
STEP_HEADERS = ["step", "group, or how many kept", "gate score (<= 1 passes)", "gate"]
TENSOR_HEADERS = ["quantized activation", "read quantized by", "read unquantized by"]


def mark_kept_nodes(report: InspectRecord) -> None:
    """Outline the nodes precision.fallback kept out of the low type in the graph picture."""
    transform: Mapping[str, Any] = report.get("precision_transform") or {}
    fb: Mapping[str, Any] = transform.get("fallback") or {}
    kept = set(fb.get("kept") or fb.get("kept_fp32") or [])
    for g in [report["graph"], *report["graph"].get("details", [])]:
        for node in g["nodes"]:
            if node.get("name") in kept:
                node["marked"] = True
                kind = calibration_file.kept_type(fb, node["name"])
                node["tooltip"] = f"{node.get('tooltip', '')}\nkept in {kind} by precision.fallback"


def _fallback_markdown(fb: Mapping[str, Any] | None) -> list[str]:
    if not fb:
        return []
    if not fb.get("needed"):
        return ["- precision.fallback=auto: not needed, the plain graph passed", ""]
    return [
        f"### precision.fallback: {len(fb['kept'])} nodes kept out of the low type "
        f"({calibration_file.kept_types(fb)}), "
        f"{fb['matmuls_still_quantized']} of {fb['quantized_matmuls']} matrix multiplies still "
        f"quantized ({fb['graphs_evaluated']} graphs evaluated)",
        "",
        f"The plain graph missed the gate: {'; '.join(fb['plain']['failing'])}.",
        "",
        tables.markdown(GROUP_HEADERS, fb["groups"]),
        "",
        tables.markdown(NODE_HEADERS, fb["nodes"]),
        "",
        tables.markdown(STEP_HEADERS, fb["steps"]),
        "",
    ]


def quantization_lines(q: QuantizationView | None) -> list[str]:
    if not q:
        return []
    frac = q.get("quantized_fraction")
    if i4 := q.get("int4"):
        return [_int4_line(i4, frac)]
    md = [
        f"- {q['mode']} Q/DQ placement: {q['placement']}; {len(q['activations'])} activation "
        f"tensors and {q['weights']} weights quantized"
        + (f"; {frac:.1%} of GEMM FLOPs run in {q['mode']}" if frac is not None else ""),
    ]
    sm = q.get("smoothing")
    if sm:
        md.append(
            f"- smoothing: {sm['mode']} (alpha {sm['alpha']}), {sm['groups']} activations "
            f"smoothed, {sm['folded']} folded into a LayerNorm"
            + (f"; {sm['note']}" if sm.get("note") else "")
        )
    return md


def _int4_line(i4: Int4View, flops: float | None) -> str:
    share = i4.get("share")
    sizes = i4.get("bytes") or {}
    tables = f", {i4['tables']} embedding table(s) too" if i4.get("tables") else ""
    return (
        f"- int4 weight-only ({i4['method']}, blocks of {i4['block_size']}): {i4['gemms']} GEMMs "
        f"read int4 weights{tables}"
        + (f", {share:.1%} of GEMM weight parameters" if share is not None else "")
        + f" ({sizes.get('int4', 0):,} B int4, {sizes.get('higher_precision', 0):,} B higher precision)"
        + (f"; {flops:.1%} of GEMM FLOPs read an int4 weight" if flops is not None else "")
    )


def transform_markdown(t: PrecisionTransformView) -> list[str]:
    md = [
        "## Precision transform",
        "",
        f"- {t['precision']}: {t['transform']}",
        accuracy_view.reference_line(t),
    ]
    data = t.get("calibration_data")
    if data:
        md.append(
            f"- calibration data: {data.get('source')}, {data.get('num_samples')} samples"
            + (" — RANDOM data, not representative of real inputs" if data.get("random") else "")
            + (f" ({data['fallback']})" if data.get("fallback") else "")
            + (f"; {data['note']}" if data.get("note") else "")
        )
        md.append(f"- calibration cache: {'hit' if t.get('calibration_cache_hit') else 'miss'}")
    md += quantization_lines(t.get("quantization"))
    md += standing_lines(t)
    rows = accuracy_view.rows(t["accuracy"])
    md += [
        "",
        f"Against the fp32 reference on {t['held_out_batches']} held-out batches"
        f"{' (the verdict: samples no search judged)' if t.get('holdout') else ''}, run by "
        f"{t.get('evaluated_with') or 'onnxruntime'} (gate {'passed' if t['gate_passed'] else 'FAILED'}"
        f"{' on RANDOM inputs' if (t.get('reference') or {}).get('random') else ''}):",
        "",
        tables.markdown(accuracy_view.HEADERS, rows),
        "",
    ]
    q = t.get("quantization")
    if q and q["activations"]:
        md += [tables.markdown(TENSOR_HEADERS, q["activations"]), ""]
    return md + _fallback_markdown(t.get("fallback")) + mixed_view.markdown(t.get("mixed"))
