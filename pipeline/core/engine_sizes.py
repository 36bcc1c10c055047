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
