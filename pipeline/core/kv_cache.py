"""A decoder's KV cache among a model's outputs: its tensors by their exporters' names, and
one entry for all of them where a person reads figures (the calibrate table, the report). A
30-layer decoder returns 60 cache tensors; one row naming the worst says more than 60 rows of
cosine 1. Light: the inspect stage's report reads it, and nothing of precision/."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pipeline.core.gate import ACCURACY_DIRECTION

# transformers/optimum name them present.N.key|value; onnxruntime-genai present_key_values
KV_OUTPUT = ("present", "present_key_values")
CACHE = "KV cache"


def is_cache(name: str) -> bool:
    """Whether an output is a tensor of a decoder's KV cache, by its exporter's name."""
    return name.split(".")[0] in KV_OUTPUT


def _same(figure: Any) -> Any:
    return figure


def folded(
    by_output: Mapping[str, Mapping[str, Any]], value: Callable[[Any], Any] = _same
) -> dict[str, dict[str, Any]]:
    """`by_output` (output -> metric -> figure, or the gate's entry whose `value(entry)` is
    the figure) with the cache tensors as one entry named CACHE: per metric the worst
    tensor's figure, which tensor that was (`worst`: metric -> name) and how many there are
    (`tensors`). Outputs keep their order; the cache stands where its first tensor did."""
    cache = {k: v for k, v in by_output.items() if is_cache(k)}
    if len(cache) < 2:
        return {k: dict(v) for k, v in by_output.items()}
    entry: dict[str, Any] = {"tensors": len(cache), "worst": {}}
    for metric, direction in ACCURACY_DIRECTION.items():
        figures = [
            (name, by[metric])
            for name, by in cache.items()
            if isinstance(value(by.get(metric)), (int, float))
        ]
        if figures:
            pick = min if direction == "min" else max
            name, figure = pick(figures, key=lambda f: value(f[1]))
            entry[metric], entry["worst"][metric] = figure, name
    out: dict[str, dict[str, Any]] = {}
    for k, v in by_output.items():
        if k not in cache:
            out[k] = dict(v)
        elif CACHE not in out:
            task = v.get("task")
            out[CACHE] = {**({"task": task} if isinstance(task, str) else {}), **entry}
    return out
