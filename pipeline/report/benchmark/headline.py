"""metrics/summary.json: the few numbers a person compares across experiments.

DVC shows every leaf of a metrics file as a column, so this file is flat, numeric only
and bounded (about 20 columns however many batch sizes or outputs a run has); the
details stay in accuracy.json, gates.json and benchmark.json, which are plain outputs.
Names (model, precision) are params already, so they are not repeated here."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeline.core.metrics_files import AccuracyMetrics, GatesMetrics
from pipeline.core.numbers import MIB

if TYPE_CHECKING:
    from pipeline.core.engine_sizes import PerParameter
    from pipeline.records.benchmark_file import BenchmarkRecord
    from pipeline.records.build_file import Manifest

# Worst over every output: the direction that is worse for each figure.
ACCURACY_WORST = {
    "max_abs_error": max,
    "mean_rel_error": max,
    "rel_error": max,
    "cosine": min,
    "top1_agreement": min,
    "metric": max,  # a metric of the user's (precision.gate.metric), one value
}
HEADLINE = ("median_ms", "p99_ms", "throughput_per_s")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def summarize(
    accuracy: AccuracyMetrics,
    gates: GatesMetrics,
    manifest: Manifest,
    benchmark: BenchmarkRecord,
    against: dict[str, float] | None = None,
    per_parameter: PerParameter | None = None,
) -> dict[str, float | int]:
    """`against`: the engine's bytes as a ratio of the fp16 and fp32 engines of the same
    graph (the build's record), as engine_vs_fp16 and engine_vs_fp32; `per_parameter`: its
    bytes per parameter of the graph and their ratio to the precision's ideal."""
    per: Mapping[str, Any] = per_parameter or {}
    out: dict[str, float | int | None] = {
        "engine_mib": round(manifest["engine"]["bytes"] / MIB, 3),
        **{f"engine_vs_{k}": v for k, v in (against or {}).items()},
        "bytes_per_parameter": per.get("bytes"),
        "engine_vs_ideal": per.get("ratio"),
        "build_s": manifest.get("build_seconds"),
        "accuracy_gate_pass": int(bool(accuracy.get("gate_passed"))),
        "build_gates_pass": int(bool(gates.get("passed"))),
    }
    per_output = accuracy.get("accuracy") or {}
    for metric, worst in ACCURACY_WORST.items():
        values = [v for m in per_output.values() if (v := _number(m.get(metric))) is not None]
        if values:
            out[f"worst_{metric}"] = worst(values)
    # A skipped backend has no column rather than a string or a zero that reads as a result.
    for backend, r in benchmark.get("results", {}).items():
        if r.get("status") != "ok":
            continue
        for field in HEADLINE:
            if (v := _number(r.get(field))) is not None:
                out[f"{backend}_{field}"] = v
    out.update(_decoder(benchmark.get("decoder")))
    return {k: n for k, v in out.items() if (n := _number(v)) is not None}


def _decoder(decoder: Mapping[str, Any] | None) -> dict[str, float | int | None]:
    """A decoder's few numbers: per backend, time to first token and time per output token
    at the middle length measured, and the decode tokens/s there; the KV cache at most."""
    if not decoder or "skipped" in decoder:
        return {}
    out: dict[str, float | int | None] = {
        "kv_cache_mib_at_max": round(decoder["kv_cache"]["bytes_at_max"] / MIB, 3)
    }
    for backend, f in decoder["backends"].items():
        prompt, past = middle(f["ttft_ms"]), middle(f["tpot_ms"])
        out[f"{backend}_ttft_ms"] = f["ttft_ms"][prompt]
        out[f"{backend}_tpot_ms"] = f["tpot_ms"][past]
        out[f"{backend}_decode_tokens_per_s"] = f["decode_tokens_per_s"][past]
    return out


def middle(by_length: dict[str, float]) -> str:
    lengths = sorted(by_length, key=int)
    return lengths[len(lengths) // 2]
