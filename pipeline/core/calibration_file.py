"""calibration.json, the calibrate stage's record of the graph it wrote: how it was made
(transform, calibration, fallback), how it was judged (accuracy, gate) and what the build
needs of it (the graph's sha256 and files, its inputs). Written and read here only; the
reader checks the fields every consumer relies on, so a file of another version or a hand
edit is one line naming the file and the field, not a KeyError in the build. Light: the
build stage reads it on an engine-store hit, which imports no numpy or onnx."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core.json_record import JsonRecord

# field -> the type every consumer relies on (the build, the engine key, the report)
RECORD = JsonRecord(
    "calibration summary",
    "the calibrate stage",
    {
        "precision": str,
        "transform": str,
        "gate": list,
        "gate_passed": bool,
        "accuracy": dict,
        "onnx_sha256": str,
        "inputs": list,
    },
)


def write(path: Path, summary: dict[str, Any]) -> Path:
    return RECORD.write(path, summary)


def read(path: Path) -> dict[str, Any]:
    return RECORD.read(path)


# The fallback record (`fallback` in calibration.json) says which type each kept node took.
def kept_types(fb: dict[str, Any]) -> str:
    """How many kept nodes went to each type: "2 in int8, 3 in fp16, 1 in fp32"; a record
    of an older search has no int8 (or fp16) list."""
    kinds = [k for k in ("int8", "fp16") if fb.get(f"kept_{k}")] + ["fp32"]
    return ", ".join(f"{len(fb.get(f'kept_{k}') or [])} in {k}" for k in kinds)


def kept_type(fb: dict[str, Any], node: str) -> str:
    """The type a node the search kept computes or stores its weight in."""
    return next((k for k in ("int8", "fp16") if node in (fb.get(f"kept_{k}") or [])), "fp32")


# Of the fallback record, what metrics/accuracy.json repeats (DVC shows it beside the gate).
FALLBACK_METRICS = (
    "needed",
    "kept",
    "kept_fp32",
    "kept_fp16",
    "kept_int8",
    "quantized_matmuls",
    "matmuls_still_quantized",
    "quantized_gemms",
    "gemms_still_quantized",
    "graphs_evaluated",
    "placement",
    "error",
    "all_high_precision",
    "cache",
)
