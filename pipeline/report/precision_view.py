"""The report's precision view: what the calibrate stage did to the graph (transform,
calibration data, accuracy against fp32, the fallback search) as data for report.json
and as rows and lines for report.md and report.html."""

from __future__ import annotations

from pipeline.core import tables


def precision_transform(calibration: dict) -> dict:
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
    }


def _fallback(fb: dict | None) -> dict | None:
    """precision.fallback=auto: the sensitivity table and the search's steps."""
    if not fb or not fb.get("needed"):
        return fb
    return {
        "needed": True,
        "kept_fp32": fb["kept_fp32"],
        "quantized_matmuls": fb["quantized_matmuls"],
        "matmuls_still_quantized": fb["matmuls_still_quantized"],
        "plain": fb["plain"],
        "cache_hit": (fb.get("cache") or {}).get("hit"),
        "sensitivity": [
            [
                r["node"],
                r["op_type"],
                r["sensitivity"],
                "kept fp32" if r["node"] in fb["kept_fp32"] else "quantized",
            ]
            for r in fb["sensitivity"]
        ],
        "steps": [
            [s["kept"], s["added"], s["score"], "pass" if s["passed"] else "fail"]
            for s in fb["steps"]
        ]
        + [
            [
                "",
                f"{p['node']} quantized again?",
                p["score"],
                "pass: quantized again" if p["passed"] else "fail: stays fp32",
            ]
            for p in fb.get("prune", [])
        ],
    }


SENSITIVITY_HEADERS = [
    "node",
    "op",
    "sensitivity (gate score added when quantized alone)",
    "result",
]
STEP_HEADERS = ["nodes kept", "last kept", "gate score (<= 1 passes)", "gate"]


def mark_kept_nodes(report: dict) -> None:
    """Outline the nodes precision.fallback kept in fp32 in the graph picture."""
    kept = set(
        ((report.get("precision_transform") or {}).get("fallback") or {}).get("kept_fp32") or []
    )
    for g in [report["graph"], *report["graph"].get("details", [])]:
        for node in g["nodes"]:
            if node.get("name") in kept:
                node["marked"] = True
                node["tooltip"] = (
                    f"{node.get('tooltip', '')}\nkept in fp32 by precision.fallback=auto"
                )


ACCURACY_HEADERS = ["output", "max abs error", "mean rel error", "cosine", "top-1 agreement"]


def accuracy_rows(figures: dict) -> list[list]:
    """One row per output; an embedding's cosine is its worst row, with the mean beside it."""
    return [
        [
            out,
            f"{m['max_abs_error']:.3g}",
            f"{m['mean_rel_error']:.3g}",
            f"{m['cosine']:.6f}"
            + (f" (worst row; mean {m['cosine_mean']:.6f})" if "cosine_mean" in m else ""),
            m.get("top1_agreement", ""),
        ]
        for out, m in figures.items()
    ]


def reference_line(t: dict) -> str:
    ref = t.get("reference") or {}
    line = f"- reference inputs: {ref.get('source', 'unknown')}" + (
        f" ({ref['path']})" if ref.get("path") else ""
    )
    if ref.get("random"):
        line += " — RANDOM inputs, not representative of real inputs"
    overlap = t.get("reference_overlap")
    if overlap:
        line += (
            f"; {overlap['overlapping_samples']} of {overlap['reference_samples']} reference samples are also "
            f"calibration samples and were left out"
        )
    return line


def _fallback_markdown(fb: dict | None) -> list[str]:
    if not fb:
        return []
    if not fb.get("needed"):
        return ["- precision.fallback=auto: not needed, the plain graph passed", ""]
    return [
        f"### precision.fallback=auto: {len(fb['kept_fp32'])} nodes kept in fp32, "
        f"{fb['matmuls_still_quantized']} of {fb['quantized_matmuls']} matrix multiplies still quantized",
        "",
        f"The plain graph missed the gate: {'; '.join(fb['plain']['failing'])}.",
        "",
        tables.markdown(SENSITIVITY_HEADERS, fb["sensitivity"]),
        "",
        tables.markdown(STEP_HEADERS, fb["steps"]),
        "",
    ]


def transform_markdown(t: dict) -> list[str]:
    md = ["## Precision transform", "", f"- {t['precision']}: {t['transform']}", reference_line(t)]
    data = t.get("calibration_data")
    if data:
        md.append(
            f"- calibration data: {data.get('source')}, {data.get('num_samples')} samples"
            + (" — RANDOM data, not representative of real inputs" if data.get("random") else "")
            + (f" ({data['fallback']})" if data.get("fallback") else "")
            + (f"; {data['note']}" if data.get("note") else "")
        )
        md.append(f"- calibration cache: {'hit' if t.get('calibration_cache_hit') else 'miss'}")
    rows = accuracy_rows(t["accuracy"])
    md += [
        "",
        f"Against the fp32 reference on {t['held_out_batches']} held-out batches, run by "
        f"{t.get('evaluated_with') or 'onnxruntime'} (gate {'passed' if t['gate_passed'] else 'FAILED'}):",
        "",
        tables.markdown(ACCURACY_HEADERS, rows),
        "",
    ]
    return md + _fallback_markdown(t.get("fallback"))
