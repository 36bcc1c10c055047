"""The fallback search behind the calibration cache: keyed by everything the search and
the final judgement read (the plain Q/DQ graph, the reference data, the gate, the task,
ONNX Runtime's version), so a rerun copies the graph and the record and runs no ONNX
Runtime at all."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core import console, fileio, hashing
from pipeline.core.config import to_dict
from pipeline.graph import onnx_model
from pipeline.inputs.array_folder import data_sha256
from pipeline.precision.calibration import cache
from pipeline.precision.common.figures_memo import FiguresMemo
from pipeline.precision.common.fp16_nodes import in_fp16
from pipeline.precision.fallback import search
from pipeline.precision.fallback.written import kept_lower, resume
from pipeline.precision.gate import accuracy, evaluator
from pipeline.records.calibration_file import FallbackRecord, Judgement
from pipeline.store import FileData

if TYPE_CHECKING:
    from pipeline.core.config import CalibrationConfig, PrecisionConfig
    from pipeline.precision.common.searchable import Searchable


class JudgedBy(accuracy.CriteriaKey):
    """What a cached judgement depends on besides the graphs (judged_by): part of the
    fallback search's cache key and of precision=auto's."""

    reference_inputs_sha256: str
    reference_outputs_sha256: str
    gate: dict[str, Any]  # precision.gate as the config holds it
    onnxruntime: str | None  # its version; None where it is not installed


class FallbackKey(JudgedBy):
    """The fallback search's cache key: what the search and the final judgement read."""

    search_version: int
    qdq_sha256: str  # the plain Q/DQ graph
    kept_in: str  # the types kept nodes go to: "fp16 where the gate holds", "fp32"


def cache_inputs(
    qdq_sha256: str,
    pairs: list[accuracy.ReferenceBatch],
    criteria: accuracy.Criteria,
    mode: str = "auto",
    ladder: tuple[str, ...] = ("fp16",),
) -> FallbackKey:
    return {
        "search_version": search.SEARCH_VERSION,
        "qdq_sha256": qdq_sha256,
        "kept_in": f"{', then '.join(ladder)} where the gate holds" if mode == "auto" else "fp32",
        **judged_by(pairs, criteria),
    }


def judged_by(pairs: list[accuracy.ReferenceBatch], criteria: accuracy.Criteria) -> JudgedBy:
    """What a cached judgement depends on besides the graphs: the reference data, the gate,
    the outputs' tasks and ONNX Runtime's version."""
    from pipeline.machine.fingerprint import package_version

    return {
        "reference_inputs_sha256": data_sha256([p[0] for p in pairs]),
        "reference_outputs_sha256": data_sha256([p[1] for p in pairs]),
        "gate": to_dict(criteria.gate),
        **criteria.key(),
        "onnxruntime": package_version("onnxruntime"),
    }


def _searched(
    graphs: Searchable,
    pairs: list[accuracy.ReferenceBatch],
    criteria: accuracy.Criteria,
    precision_cfg: PrecisionConfig,
    plain: Judgement,
    written: Callable[..., Judgement],
    memo: FiguresMemo,
) -> tuple[FallbackRecord, Judgement]:
    """The search from the plain graph's judgement; its choice written and judged as
    written (resumed with written graphs where it misses: fallback/written.py's resume); with
    fallback=auto its kept nodes in fp16 where the gate holds. The record and the final
    graph's judgement; dest holds that graph."""
    console.note(
        f"precision.fallback={precision_cfg.fallback}: {precision_cfg.name} misses the gate; "
        f"searching for the fewest nodes to keep out of it (groups first, then nodes)"
    )
    try:
        try:
            record = search.search(graphs, pairs, criteria, evaluator.judged(plain["gate"]), memo)
        finally:  # a search that fails measured figures too
            memo.save()
        final = written(record["kept"])  # as written: the search judged it as emulated
        if not final["gate_passed"]:
            console.warn(
                f"precision.fallback: the graph written with the search's choice misses the "
                f"gate as written ({'; '.join(evaluator.judged(final['gate'])['failing'])}); "
                f"keeping more nodes, each graph judged as written"
            )
            final = resume(graphs, record, written)
    except search.SearchFailed as e:
        e.plain = plain
        raise
    if precision_cfg.fallback == "auto":
        final = kept_lower(record, written, graphs.ladder, graphs.fits) or final
    return record, final


def _writer(
    dest: Path, graphs: Searchable, judge: Callable[[], Judgement]
) -> Callable[..., Judgement]:
    """written(keep, lower): the graph with `keep` out of the low type (those `lower` names
    in the type it gives, int8 weights or fp16 compute, the others in fp32), written to
    dest and judged there."""

    def written(keep: list[str], lower: dict[str, str] | None = None) -> Judgement:
        lower = lower or {}
        int8 = [n for n, kind in lower.items() if kind == "int8"]
        fp16 = [n for n, kind in lower.items() if kind == "fp16"]
        model = graphs.graph(keep, int8)
        if fp16:
            in_fp16(model, list(fp16), graphs.base_dir or dest.parent)
        cache.save_beside(model, dest, graphs.base_dir or dest.parent)
        # its fp16 copies stay in protobuf's memory until the message goes, though its
        # tensors name dest's file now: 290 MB beside the judging of a 135 M decoder's graph
        del model
        return judge()

    return written


def run(
    dest: Path,
    graphs: Searchable,
    qdq_sha256: str,
    pairs: list[accuracy.ReferenceBatch],
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    criteria: accuracy.Criteria,
    judge: Callable[[], Judgement],
) -> tuple[FallbackRecord, Judgement]:
    """dest holds the plain Q/DQ graph (sha256 given); judge() runs whatever dest holds
    against the gate (gate/judging.judge). If the plain graph fails, dest becomes the
    search's result. Returns the search record and the final judgement (with the final
    graph's onnx_sha256)."""
    inputs = cache_inputs(qdq_sha256, pairs, criteria, str(precision_cfg.fallback), graphs.ladder)
    key = hashing.sha256_json(inputs)
    started = time.perf_counter()

    written = _writer(dest, graphs, judge)

    def make() -> tuple[dict[str, FileData], dict[str, Any], str]:
        final = judge()
        record: FallbackRecord = {"mode": "auto", "needed": not final["gate_passed"]}
        if record["needed"]:
            memo = cache.figures_memo(
                calibration_cfg,
                {
                    "kind": "search figures",
                    **{k: v for k, v in inputs.items() if k not in ("gate", "kept_in")},
                },
            )
            record, final = _searched(graphs, pairs, criteria, precision_cfg, final, written, memo)
        files = {
            **cache.entry_files(dest),
            "search.json": fileio.to_json({"record": record, "final": final}).encode(),
        }
        meta = {"kind": "fallback search", **{k: v for k, v in inputs.items() if k != "gate"}}
        return files, meta, "miss"

    got, cache_record = cache.cached(
        calibration_cfg, key, make, "fallback search", required=("model.onnx", "search.json")
    )
    if got.hit:
        cache.write_graph(got, dest)
    stored = json.loads(got.read("search.json"))
    record, final = stored["record"], stored["final"]
    final["onnx_sha256"] = onnx_model.sha256(dest)  # the graph and its external data
    record["cache"] = {**cache_record, "seconds": round(time.perf_counter() - started, 3)}
    return record, final
