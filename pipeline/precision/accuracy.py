"""Compare outputs with the fp32 reference: the figures behind the accuracy gate."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.core import gate as gate_lib
from pipeline.core.errors import PipelineError


class GateFailed(PipelineError):
    """The accuracy gate's one line, with the whole summary behind it, so the caller
    can write every metric before the error stops the run."""

    def __init__(self, line: str, summary: dict) -> None:
        super().__init__(line)
        self.summary = summary


def compare(
    reference: list[dict[str, np.ndarray]], candidate: list[dict[str, np.ndarray]], task: str
) -> dict:
    """Per output: max absolute error, mean relative error, cosine similarity, and
    top-1 agreement for classifiers; each over all batches together. For embeddings
    (task=embedding) cosine is taken per row: `cosine` is the worst row (what the
    gate judges), `cosine_mean` the mean, and there is no top-1."""
    result = {}
    for name in reference[0]:
        ref, got = _stacked(name, reference, candidate)
        diff = np.abs(ref - got)
        denom = np.linalg.norm(ref) * np.linalg.norm(got)
        metrics = {
            "max_abs_error": float(diff.max()) if diff.size else 0.0,
            "mean_rel_error": float((diff / np.maximum(np.abs(ref), 1e-6)).mean())
            if diff.size
            else 0.0,
            "cosine": float((ref * got).sum() / denom)
            if denom > 0
            else float(np.allclose(ref, got)),
            "finite": bool(np.isfinite(got).all()),
        }
        if task == "embedding" and ref.ndim == 2 and len(ref):
            rows = row_cosines(ref, got)
            metrics.update(cosine=float(rows.min()), cosine_mean=float(rows.mean()), rows=len(rows))
        if task == "classification" and ref.ndim == 2 and ref.shape[1] > 1 and len(ref):
            metrics["top1_agreement"] = float((ref.argmax(1) == got.argmax(1)).mean())
        result[name] = metrics
    return result


def _stacked(
    name: str, reference: list[dict[str, np.ndarray]], candidate: list[dict[str, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """One output over all batches: rows of one width where every batch has it, else one
    flat vector (an output whose shape follows the input's values, e.g. ConstantOfShape,
    differs from batch to batch: only the element-wise figures apply to it)."""
    refs = [np.atleast_1d(b[name]).astype(np.float64) for b in reference]
    gots = [np.atleast_1d(b[name]).astype(np.float64) for b in candidate]
    if len(refs) != len(gots):
        raise PipelineError(f"output '{name}': {len(gots)} batches, reference has {len(refs)}")
    for i, (r, g) in enumerate(zip(refs, gots)):
        if r.shape != g.shape:
            raise PipelineError(
                f"output '{name}' has shape {g.shape} in batch {i}, reference has {r.shape}"
            )
    # The width spelled out: reshape(0, -1) of an empty output (Range to nothing) is ambiguous.
    rows = [r.reshape(len(r), int(np.prod(r.shape[1:]))) for r in refs]
    if len({r.shape[1] for r in rows}) == 1:
        return np.concatenate(rows), np.concatenate(
            [g.reshape(r.shape) for g, r in zip(gots, rows)]
        )
    return np.concatenate([r.ravel() for r in refs]), np.concatenate([g.ravel() for g in gots])


def row_cosines(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row; two all-zero rows agree (1.0)."""
    norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1)
    dots = (ref * got).sum(1)
    same = np.all(np.isclose(ref, got), axis=1).astype(np.float64)
    return np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), same)


GATE_CHECKS = (
    # (config key, metric, direction): "max" means the metric must not exceed the threshold
    ("max_abs_error", "max_abs_error", "max"),
    ("max_mean_rel_error", "mean_rel_error", "max"),
    ("min_cosine", "cosine", "min"),
    ("min_top1_agreement", "top1_agreement", "min"),
)


def check_gate(figures: dict, gate: Any) -> list[dict]:
    """Each configured threshold against each output, in the one gate shape
    (pipeline.core.gate); every result is kept, pass or fail."""
    results = []
    for output, metrics in figures.items():
        if not metrics.get("finite", True):
            results.append(
                gate_lib.result(
                    "finite",
                    False,
                    True,
                    passed=False,
                    subject=output,
                    metric="finite",
                    detail=f"output '{output}' has NaN or inf",
                )
            )
        for key, metric, direction in GATE_CHECKS:
            threshold = gate.get(key) if hasattr(gate, "get") else getattr(gate, key, None)
            if threshold is None or metric not in metrics:
                continue
            results.append(
                gate_lib.result(
                    key,
                    metrics[metric],
                    float(threshold),
                    direction=direction,
                    subject=output,
                    metric=metric,
                )
            )
    return results


def passed(results: list[dict]) -> bool:
    return not gate_lib.failures(results)


def raise_on_failure(results: list[dict], label: str, summary: dict) -> None:
    """One line naming every failing metric, its value and its threshold; the
    exception carries `summary` for the metrics file."""
    line = gate_lib.failure_line(f"accuracy gate failed for {label}", results)
    if line:
        raise GateFailed(line, summary)
