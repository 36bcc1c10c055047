"""Engine sizes as the stages record and compare them: the fp16 and fp32 engines of a graph
(calibration.json's `engines`, measured by flow/engine_sizes.py) and where an engine stands
against them. Light: the build, inspect and benchmark stages read it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

# The transforms whose engines are held against fp16's by default (build.reference_engines).
QUANTIZED = ("qdq", "int4", "auto")


class EngineSize(TypedDict):
    bytes: int  # engine.plan as TensorRT writes it
    key: str  # the engine key a build stage would store it under
    source: str  # "store" (a build stage built it), "measured" (an earlier measure), "built"


def measured(record: Mapping[str, Any] | None) -> dict[str, EngineSize]:
    """The references calibration.json's `engines` holds a size for (read from a file:
    anything else in it is left out)."""
    out: dict[str, EngineSize] = {}
    for k in ("fp16", "fp32"):
        v = (record or {}).get(k)
        if isinstance(v, dict) and isinstance(v.get("bytes"), int) and v["bytes"] > 0:
            out[k] = cast(EngineSize, v)
    return out


def against(engine_bytes: int, references: dict[str, EngineSize]) -> dict[str, float]:
    """An engine's bytes as a ratio of each reference's: {"fp16": 1.5, "fp32": 1.34}."""
    return {k: round(engine_bytes / r["bytes"], 4) for k, r in references.items() if r["bytes"]}


def larger_line(precision: str, engine_bytes: int, references: dict[str, EngineSize]) -> str:
    """The line a run prints when its quantized engine is larger than the fp16 one of the
    same graph, settings and machine; "" where it is not."""
    fp16 = references.get("fp16")
    if fp16 is None or engine_bytes <= fp16["bytes"]:
        return ""
    return (
        f"the {precision} engine is {engine_bytes / fp16['bytes']:.2f}x the fp16 engine of the "
        f"same graph, settings and machine ({engine_bytes / 1e6:.3g} MB against "
        f"{fp16['bytes'] / 1e6:.3g} MB): a plan holds code per layer besides its weights, and "
        f"here that outweighs what the quantized weights save; precision=fp16, or "
        f"precision=auto (objective engine_bytes), gives the smaller engine"
    )


# The least bytes a parameter takes in an engine of each precision, as (GEMM weights, the
# rest): GEMM weights in the precision's weight type, the rest (tables, norms, biases) in
# fp16 where the precision quantizes. int4 adds a fp16 scale per block (BLOCK_SCALE).
# precision=auto has no one ideal: its search picks a type per GEMM.


class WeightCounts(TypedDict):
    """graph/weight_counts.py's count: what an engine's bytes per parameter are held against."""

    parameters: int  # elements of the graph's float initializers (a tied weight once)
    gemm: int  # of those, the elements GEMMs and convolutions read as weights


IDEAL_BYTES = {
    "fp32": (4.0, 4.0),
    "tf32": (4.0, 4.0),
    "fp16": (2.0, 2.0),
    "bf16": (2.0, 2.0),
    "int8": (1.0, 2.0),
    "fp8": (1.0, 2.0),
    "int4_awq": (0.5, 2.0),
    "int4_rtn": (0.5, 2.0),
}
BLOCK_SCALE = 2.0  # bytes of an int4 block's scale (fp16)


class PerParameter(TypedDict):
    parameters: int
    bytes: float  # the engine's bytes per parameter
    ideal: float | None  # IDEAL_BYTES for its precision, per parameter
    ratio: float | None  # bytes / ideal


def per_parameter(
    engine_bytes: int, weights: WeightCounts, precision: str, block_size: int
) -> PerParameter | None:
    """The engine's bytes per parameter of its graph, against the ideal of its precision;
    None for a graph without parameters."""
    if weights["parameters"] <= 0:
        return None
    gemm_bytes, rest_bytes = IDEAL_BYTES.get(precision, (0.0, 0.0))
    if precision.startswith("int4"):
        gemm_bytes += BLOCK_SCALE / block_size
    ideal = None
    if gemm_bytes:
        rest = weights["parameters"] - weights["gemm"]
        ideal = (gemm_bytes * weights["gemm"] + rest_bytes * rest) / weights["parameters"]
    per = engine_bytes / weights["parameters"]
    return {
        "parameters": weights["parameters"],
        "bytes": round(per, 4),
        "ideal": round(ideal, 4) if ideal else None,
        "ratio": round(per / ideal, 4) if ideal else None,
    }


def per_parameter_text(per: PerParameter, precision: str) -> str:
    """`2.45 B (ideal 2.00 for fp16: 1.23x) over 25.1 M parameters`"""
    count = f"{per['parameters'] / 1e6:.3g} M parameters"
    if per["ideal"] is None:
        return f"{per['bytes']:.3g} B over {count}"
    return (
        f"{per['bytes']:.3g} B (ideal {per['ideal']:.3g} for {precision}: {per['ratio']:.2f}x) "
        f"over {count}"
    )
