"""Compare outputs with the fp32 reference: the figures behind the accuracy gate."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.errors import PipelineError


def compare(reference: list[dict[str, np.ndarray]], candidate: list[dict[str, np.ndarray]],
            classifier: bool) -> dict:
    """Per output: max absolute error, mean relative error, cosine similarity, and
    top-1 agreement for classifiers; each over all batches together."""
    result = {}
    for name in reference[0]:
        ref = np.concatenate([b[name].astype(np.float64).reshape(len(b[name]), -1) for b in reference])
        got = np.concatenate([b[name].astype(np.float64).reshape(len(b[name]), -1) for b in candidate])
        if ref.shape != got.shape:
            raise PipelineError(f"output '{name}' has shape {got.shape}, reference has {ref.shape}")
        diff = np.abs(ref - got)
        denom = np.linalg.norm(ref) * np.linalg.norm(got)
        metrics = {
            "max_abs_error": float(diff.max()) if diff.size else 0.0,
            "mean_rel_error": float((diff / np.maximum(np.abs(ref), 1e-6)).mean()) if diff.size else 0.0,
            "cosine": float((ref * got).sum() / denom) if denom > 0 else float(np.allclose(ref, got)),
            "finite": bool(np.isfinite(got).all()),
        }
        if classifier and ref.ndim == 2 and ref.shape[1] > 1:
            metrics["top1_agreement"] = float((ref.argmax(1) == got.argmax(1)).mean())
        result[name] = metrics
    return result


GATE_CHECKS = (
    # (config key, metric, direction): "max" means the metric must not exceed the threshold
    ("max_abs_error", "max_abs_error", "max"),
    ("max_mean_rel_error", "mean_rel_error", "max"),
    ("min_cosine", "cosine", "min"),
    ("min_top1_agreement", "top1_agreement", "min"),
)


def check_gate(figures: dict, gate: Any) -> list[dict]:
    """Each configured threshold against each output; a failure names metric, value
    and threshold."""
    results = []
    for output, metrics in figures.items():
        if not metrics.get("finite", True):
            results.append({"output": output, "metric": "finite", "value": False, "threshold": True,
                            "passed": False})
        for key, metric, direction in GATE_CHECKS:
            threshold = gate.get(key) if hasattr(gate, "get") else getattr(gate, key, None)
            if threshold is None or metric not in metrics:
                continue
            value = metrics[metric]
            passed = value <= threshold if direction == "max" else value >= threshold
            results.append({"output": output, "metric": metric, "value": value, "threshold": float(threshold),
                            "direction": direction, "passed": bool(passed)})
    return results


def raise_on_failure(results: list[dict], label: str) -> None:
    failed = [r for r in results if not r["passed"]]
    if failed:
        f = failed[0]
        op = "<=" if f.get("direction") == "max" else ">="
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        raise PipelineError(f"accuracy gate failed for {label}: {f['metric']} of output '{f['output']}' is "
                            f"{f['value']:.6g}, needs {op} {f['threshold']:.6g}{more}")
