"""calibration.json, the calibrate stage's record of the graph it wrote: how it was made
(transform, calibration, fallback), how it was judged (accuracy, gate) and what the build
needs of it (the graph's sha256 and files, its inputs). Written and read here only; the
reader checks the fields every consumer relies on, so a file of another version or a hand
edit is one line naming the file and the field, not a KeyError in the build. Light: the
build stage reads it on an engine-store hit, which imports no numpy or onnx."""

# No `from __future__ import annotations`: a TypedDict needs its Required[] evaluated at class
# creation for __required_keys__, which the record reader checks.

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NotRequired, Required, TypedDict

from pipeline.core.engine_sizes import EngineSize, WeightCounts
from pipeline.core.gate import GateResult
from pipeline.core.json_record import JsonRecord


class InputSpec(TypedDict):
    """A graph input as the build resolves its profiles from it, without the weights."""

    name: str
    dtype: str
    dims: list[int | str | None]  # a name, or None, where the dim is dynamic


class Judgement(TypedDict, total=False):
    """A written graph's outputs against the fp32 reference, and the gate's verdict
    (precision/gate/judging.judge); the Required fields are what every consumer reads."""

    accuracy: Required[dict[str, dict[str, Any]]]  # output -> metric -> figure
    gate: Required[list[GateResult]]
    gate_passed: Required[bool]
    inputs: Required[list[InputSpec]]
    evaluated_with: str  # "onnxruntime (cpu)", or with low types emulated
    held_out_batches: int
    ops: dict[str, int]  # op type -> count in the written graph


class TablesRecord(TypedDict, total=False):
    """The embedding tables' type (precision/finish.py): the names under the type they
    went to, and what missed the gate on the way."""

    int4: list[str]
    fp16: list[str]
    fp32: list[str]
    missed_the_gate: dict[str, list[str]]  # type -> the gate's failures, a line each


class FallbackRecord(TypedDict, total=False):
    """precision.fallback=auto's search (precision/fallback/search.py), as written."""

    mode: str
    needed: bool
    placement: str
    kept: list[str]  # every node kept out of the low type, most sensitive first
    kept_fp32: list[str]
    kept_fp16: list[str]
    kept_int8: list[str]
    quantized_nodes: int
    quantized_matmuls: int  # these four and gemms_by_op: fallback/record_rows.counts
    matmuls_still_quantized: int
    quantized_gemms: int
    gemms_still_quantized: int
    gemms_by_op: dict[str, dict[str, int]]
    plain: dict[str, Any]
    all_high_precision: dict[str, Any]
    groups: list[dict[str, Any]]
    blocks: list[dict[str, Any]]  # where the kept groups' nodes were taken a layer at a time
    nodes: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    graphs_evaluated: int
    ranked_on_batches: int  # units are ranked on these, each bisection step judged on all
    batches: int
    decided_on_subset: int  # graphs whose verdict the first batches settled
    figures_reused: int  # judgements from figures an earlier search measured (figures_memo)
    written_checks: list[dict[str, Any]]
    fp16_checks: list[dict[str, Any]]
    int8_checks: list[dict[str, Any]]
    error: str
    cache: dict[str, Any]
    seconds: float


class EnginesRecord(TypedDict):
    """The fp16 and fp32 engines of the exported graph on this machine, each where TensorRT
    could build it (precision/common/engine_cost.record)."""

    measured_with: str  # "TensorRT-RTX 1.7.1.116, no GPU (portable ahead-of-time target)"
    settings_sha256: str  # the build settings, profiles and machine they were measured under
    fp32: NotRequired[EngineSize]
    fp16: NotRequired[EngineSize]


class WeakTypingRecord(TypedDict):
    """calibration.json's weak_typing section: written by precision/weak_precision.prepare,
    read by engine/weak_typing (checked_info). The calibrator's keys for int8 only, whose
    implicit calibrator runs in the build."""

    flags: list[str]  # the builder flags, "FP16", "INT8", ...
    calibrator: NotRequired[str]  # TensorRT's calibrator class, "IInt8EntropyCalibrator2"
    inputs_file: NotRequired[str]  # WEAK_CALIBRATION_INPUTS, beside the graph
    batches_used: NotRequired[int]  # the batches of the first one's shapes
    batches_dropped: NotRequired[int]
    data: NotRequired[dict[str, Any]]  # the calibration data's description
    cache_key: NotRequired[str]  # a sha256: TensorRT's calibration cache's folder
    cache_dir: NotRequired[str | None]  # calibration.cache_dir; None: the default store


class CalibrationRecord(Judgement, total=False):
    """calibration.json: how the graph was made, how it was judged, what the build needs."""

    precision: Required[str]
    transform: Required[str]  # "none", "autocast", "qdq", "int4", "auto"
    onnx_sha256: Required[str]
    source_sha256: str  # the exported graph it was made from
    onnx_files: dict[str, Any]  # file -> size and mtime: the build's hash shortcut
    reference: dict[str, Any]  # the reference inputs (export.json's "reference")
    reference_overlap: dict[str, Any]
    weak_typing: WeakTypingRecord
    autocast: dict[str, Any]
    calibration: dict[str, Any]  # the quantizing family's record
    fallback: FallbackRecord
    mixed: dict[str, Any]  # precision=auto's search
    tables: TablesRecord
    activations: dict[str, Any]
    # Where a search chose the graph: the held-out split (gate/verdict.py) and the search's
    # own figure of its choice on its samples, under its tightened gate; the top-level
    # accuracy and gate are the verdict on the held-out samples.
    holdout: dict[str, Any]
    search_judgement: dict[str, Any]
    # The fp16 and fp32 engines of the exported graph on this machine (bytes, key, where
    # the size came from) and how they were measured: what the build stands its engine by.
    engines: EnginesRecord
    # export.json's count of the graph's parameters: what the engine's bytes per parameter
    # are held against (core/engine_sizes.per_parameter)
    weights: WeightCounts
    peak_rss_mib: float


RECORD = JsonRecord("calibration summary", "the calibrate stage", CalibrationRecord)


def write(path: Path, summary: CalibrationRecord) -> Path:
    return RECORD.write(path, summary)


def read(path: Path) -> CalibrationRecord:
    return RECORD.read(path)


# The fallback record (`fallback` in calibration.json) says which type each kept node took.
def kept_types(fb: Mapping[str, Any]) -> str:
    """How many kept nodes went to each type: "2 in int8, 3 in fp16, 1 in fp32"; a record
    of an older search has no int8 (or fp16) list."""
    kinds = [k for k in ("int8", "fp16") if _kept(fb, k)] + ["fp32"]
    return ", ".join(f"{len(_kept(fb, k))} in {k}" for k in kinds)


def kept_type(fb: Mapping[str, Any], node: str) -> str:
    """The type a node the search kept computes or stores its weight in."""
    return next((k for k in ("int8", "fp16") if node in _kept(fb, k)), "fp32")


def _kept(fb: Mapping[str, Any], kind: str) -> list[str]:
    """`fb`: the record, or the report's view of it (the same kept_* lists)."""
    return list(fb.get(f"kept_{kind}") or [])


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
