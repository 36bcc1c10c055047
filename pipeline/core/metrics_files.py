"""metrics/accuracy.json and metrics/gates.json, the detail beside the one DVC metrics file
(summary_file.py): every accuracy figure and gate of the calibrate stage, every build gate
of the build stage, pass or fail. Written and read here only; the benchmark stage reads
both back into summary.json (see core/json_record.py for the check)."""

# No `from __future__ import annotations`: the TypedDicts' Required[] are evaluated at class
# creation, as the reader's field check needs.
from pathlib import Path
from typing import Any, Required, TypedDict

from pipeline.core.gate import GateResult
from pipeline.core.json_record import JsonRecord


class AccuracyMetrics(TypedDict, total=False):
    """metrics/accuracy.json (flow/calibrate_stage.accuracy_metrics)."""

    accuracy: Required[dict[str, dict[str, Any]]]  # output -> metric -> figure
    gate: Required[dict[str, dict[str, dict[str, Any]]]]  # output -> metric -> value, threshold
    gate_passed: Required[bool]
    model: str
    precision: str
    held_out_batches: int
    failing: list[GateResult]
    evaluated_with: str | None
    reference_inputs: dict[str, Any] | None
    calibration_data: dict[str, Any]
    reference_overlap: dict[str, Any]
    fallback: dict[str, Any]  # FALLBACK_METRICS of the search's record
    # Where a search chose the graph, `gate` is the verdict on the held-out samples and this
    # is the search's figure on its own (output -> metric -> value, threshold, passed).
    search: dict[str, dict[str, dict[str, Any]]]
    holdout: dict[str, Any]  # samples in each part, the share, the margin, a note if few


class GatesMetrics(TypedDict):
    """metrics/gates.json (analysis/gates.metrics)."""

    passed: bool
    failed: int  # how many gates failed
    gates: dict[str, dict[str, Any]]  # gate -> its GateResult less the name


ACCURACY = JsonRecord("accuracy metrics", "the calibrate stage", AccuracyMetrics)
GATES = JsonRecord("build gates", "the build stage", GatesMetrics)


def write_accuracy(path: Path, metrics: AccuracyMetrics) -> Path:
    return ACCURACY.write(path, metrics)


def read_accuracy(path: Path) -> AccuracyMetrics:
    return ACCURACY.read(path)


def write_gates(path: Path, metrics: GatesMetrics) -> Path:
    return GATES.write(path, metrics)


def read_gates(path: Path) -> GatesMetrics:
    return GATES.read(path)
