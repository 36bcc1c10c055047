"""The precision section's accuracy table: each output's figures against fp32 (a decoder's
KV cache as one row), and where the reference inputs came from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core import kv_cache

HEADERS = [
    "output",
    "task",
    "max abs error",
    "worst sample rel error",
    "cosine",
    "top-1 agreement",
    "metric",
]


def rows(figures: dict[str, Any]) -> list[list[Any]]:
    """One row per output (and one for a metric of the user's; one for a decoder's KV
    cache, its worst tensor named); an embedding's or a sequence's cosine is its worst row,
    with the mean beside it. A figure an entry does not have is left blank."""

    def num(m: dict[str, Any], key: str, fmt: str = ".3g") -> str:
        return format(m[key], fmt) if isinstance(m.get(key), (int, float)) else ""

    def name(out: str, m: dict[str, Any]) -> str:
        if out != kv_cache.CACHE or "tensors" not in m:
            return out
        worst = m["worst"].get("cosine") or next(iter(m["worst"].values()), "")
        return f"{out} ({m['tensors']} tensors; worst {worst})"

    return [
        [
            name(out, m),
            m.get("task", ""),
            num(m, "max_abs_error"),
            num(m, "rel_error"),
            num(m, "cosine", ".6f")
            + (f" (worst row; mean {m['cosine_mean']:.6f})" if "cosine_mean" in m else ""),
            m.get("top1_agreement", ""),
            num(m, "metric", ".4g"),
        ]
        for out, m in kv_cache.folded(figures).items()
    ]


def reference_line(t: Mapping[str, Any]) -> str:
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
