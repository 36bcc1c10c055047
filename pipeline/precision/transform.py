"""The calibrate stage's transform, whatever the precision: the one door to precision/.

fp32/tf32 leave the graph alone; fp16/bf16 go through ModelOpt AutoCast (autocast/);
int8/fp8 through explicit Q/DQ (qdq/), int4 through blocked weights (int4/), each with its
fallback search (fallback/) where the graph misses the gate; precision=auto picks a type
per GEMM (mixed/). What every quantized graph goes through after its family is in
finish.py; how a graph is judged, in gate/judging.py. Where a search chooses the graph, it
judges one part of the reference samples and the gate's verdict is on the other
(gate/verdict.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pipeline.core import fileio, hashing
from pipeline.core.errors import PipelineError
from pipeline.core.layout import CALIBRATION_SUMMARY, GRAPH, REFERENCE
from pipeline.graph import onnx_import, onnx_model
from pipeline.inputs import reference_file, samples
from pipeline.precision import finish
from pipeline.precision.common import engine_cost
from pipeline.precision.common.engine_cost import EngineCost
from pipeline.precision.gate import accuracy, tasks, verdict
from pipeline.precision.gate.judging import judge
from pipeline.records import calibration_file, export_file
from pipeline.records.calibration_file import CalibrationRecord, Judgement

if TYPE_CHECKING:
    from pipeline.core.config import CalibrationConfig, ModelConfig, PrecisionConfig
    from pipeline.precision.calibration.result import QuantizeResult


@dataclass(frozen=True)
class Job:
    """What one transform works from: its three config groups, the gate it is judged by,
    how its reference batches split for a search, and the engine sizes where measured."""

    precision: PrecisionConfig
    calibration: CalibrationConfig
    model: ModelConfig
    criteria: accuracy.Criteria
    holdout: verdict.Holdout
    engines: EngineCost | None = None

    def judge(
        self, graph: Path, batches: list[accuracy.ReferenceBatch], searching: bool = False
    ) -> Judgement:
        """`graph` on `batches`, by the gate (searching: the search's tightened one)."""
        by = self.holdout.searching(self.criteria) if searching else self.criteria
        return judge(graph, batches, self.precision, by)


@dataclass
class Made:
    held_out: list[accuracy.ReferenceBatch]  # the reference batches that are not calibration's
    quantized: QuantizeResult | None = None  # of a strongly typed Q/DQ (or int4) graph
    judged: Judgement | None = None  # the written graph's judgement, where made judged it
    split: verdict.Split | None = None  # where made split held_out for a search of its own


def transform(
    export_dir: Path,
    out_dir: Path,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
    engines: EngineCost | None = None,
) -> CalibrationRecord:
    """Write out_dir/model.onnx (the graph TensorRT will build) and calibration.json.
    `engines` (the calibrate stage's, where it measures engines) sizes the fp16 and fp32
    engines of the exported graph, recorded for the build to stand its engine against, and
    precision=auto's candidates. A graph that misses the gate raises accuracy.GateFailed,
    carrying every metric."""
    src = export_dir / GRAPH
    pairs = reference_file.read(export_dir / REFERENCE)
    if not pairs:
        raise PipelineError(f"no reference batches in {export_dir / 'reference.npz'}; rerun export")
    # What the gate judges by, checked before any work.
    reference = export_file.reference_info(export_dir)
    criteria = accuracy.Criteria.of(precision_cfg, model_cfg, bool(reference.get("random")))
    criteria.tasks.check_outputs(list(tasks.split_labels(pairs[0][1])[0]))
    holdout = verdict.Holdout(
        float(precision_cfg.holdout),
        float(precision_cfg.search_margin),
        samples.layout_of_export(export_dir).axes,
    )
    job = Job(precision_cfg, calibration_cfg, model_cfg, criteria, holdout, engines)
    with fileio.staged_dir(out_dir) as tmp:
        summary: dict[str, Any] = {
            "precision": precision_cfg.name,
            "transform": precision_cfg.transform,
            "source_sha256": hashing.sha256_file(src),
            "reference": reference,
        }
        weights = export_file.weights(export_dir)
        if weights:
            summary["weights"] = weights
        record = _written(src, tmp / GRAPH, pairs, summary, job)
        if engines is not None:  # measured once the graph passed (auto measured them first)
            engines.measure_references(export_dir, pairs[0][0])
            record["engines"] = engine_cost.record(engines)
        calibration_file.write(tmp / CALIBRATION_SUMMARY, record)
    return record


def _written(
    src: Path,
    dest: Path,
    pairs: list[accuracy.ReferenceBatch],
    summary: dict[str, Any],
    job: Job,
) -> CalibrationRecord:
    """dest made, chosen and judged: the summary, once the verdict passes."""
    made = _make_graph(src, dest, pairs, summary, job)
    parts = made.split or _split_for(dest, made, job)
    if not _choose(dest, made, parts, summary, job):
        parts = verdict.unsplit(made.held_out)  # nothing was chosen by measurement
    summary.update(job.judge(dest, parts.verdict))
    if parts.info:
        searched = job.judge(dest, parts.search, searching=True)
        summary["search_judgement"] = verdict.brief(searched, parts.info)
        summary["holdout"] = parts.info
    if made.quantized is not None or job.precision.transform == "auto":
        summary["calibration"].update(finish.quantized_view(dest, parts.verdict[0][0]))
    files, summary["onnx_sha256"] = onnx_model.files_and_sha256(dest)
    # the build takes the graph's hash from here while the files are unchanged (one read)
    summary["onnx_files"] = onnx_model.file_stats(files)
    label = f"{job.precision.name} ONNX"
    accuracy.raise_on_failure(summary["gate"], label, summary, verdict.failure_hint(summary))
    # a record now: the writer refuses one lacking a required field
    return cast(CalibrationRecord, summary)


def _choose(
    dest: Path, made: Made, parts: verdict.Split, summary: dict[str, Any], job: Job
) -> bool:
    """What a search decides, on the search's part of the reference batches and under the
    tightened gate: the nodes the fallback keeps, then the embedding tables' types. dest
    ends as the graph chosen; the verdict is the caller's. Whether anything was chosen by
    measurement (precision=auto always is)."""
    p = job.precision
    chosen, passed = made.split is not None, True
    if made.quantized is not None and p.fallback != "none":
        found = _searched(dest, made, parts.search, summary, job)
        summary.update(found)
        passed, chosen = found["gate_passed"], bool(summary["fallback"].get("needed"))
    elif made.judged is not None:
        passed = made.judged["gate_passed"]
    elif parts.info:  # the plain graph, before its tables are tried
        passed = job.judge(dest, parts.search, searching=True)["gate_passed"]
    if p.transform == "int4" and p.activations == "fp16":
        first = made.held_out[0][0]
        summary.update(finish.fp16_activations(dest, first, p, job.calibration))
    if parts.info and passed:
        searching = job.holdout.searching(job.criteria)
        tables = finish.cheapest_tables(dest, parts.search, p, searching)
        if tables is not None:
            summary["tables"] = tables
            chosen = True
    return chosen


def _split_for(dest: Path, made: Made, job: Job) -> verdict.Split:
    """The batches a search judges and those the verdict judges: split where the quantized
    graph's kept nodes (the fallback) or its embedding tables' types will be chosen by
    measurement; else every held-out batch is the verdict's."""
    from pipeline.precision import embedding_tables

    if made.quantized is None:
        return verdict.unsplit(made.held_out)
    if job.precision.fallback == "none":
        if not embedding_tables.candidates(onnx_model.load(dest, check=False, weights=False)):
            return verdict.unsplit(made.held_out)
    return job.holdout.split(made.held_out)


def _make_graph(
    src: Path, dest: Path, pairs: list[accuracy.ReferenceBatch], summary: dict[str, Any], job: Job
) -> Made:
    """dest, the graph the precision asks for; what it adds to the summary goes there."""
    p = job.precision
    if p.mode == "weak":
        # TensorRT 10 weak typing: the graph stays fp32, builder flags pick the precision.
        from pipeline.precision import weak_precision

        info = weak_precision.prepare(src, dest.parent, p, job.calibration, job.model)
        summary.update(transform="none", weak_typing=info)
        onnx_import.copy_graph(src, dest)
        return Made(pairs)
    if p.transform == "none":
        onnx_import.copy_graph(src, dest)
        return Made(pairs)
    if p.transform == "autocast":
        # The first reference batch tells AutoCast real activation ranges; the rest are held out.
        from pipeline.precision.autocast.cast import autocast

        summary["autocast"] = autocast(src, dest, p, job.calibration, pairs[0][0])
        if (tables := finish.cast_tables(dest, p)) is not None:
            summary["autocast"]["tables"] = tables
        return Made(pairs[1:] if len(pairs) > 1 else pairs)
    if p.transform == "auto":
        return _auto(src, dest, pairs, summary, job)
    return _quantized(src, dest, pairs, summary, job)


def _quantized(
    src: Path, dest: Path, pairs: list[accuracy.ReferenceBatch], summary: dict[str, Any], job: Job
) -> Made:
    """int8/fp8 (Q/DQ) or int4 over the whole graph, judged on the reference batches that
    are not calibration samples."""
    from pipeline.inputs import calibration_data
    from pipeline.precision.int4.quantize import quantize_int4
    from pipeline.precision.qdq import quantize

    make = quantize_int4 if job.precision.transform == "int4" else quantize.quantize
    result = make(src, dest, job.precision, job.calibration, job.model)
    summary["calibration"] = result.summary
    if result.data is None:  # int4 round-to-nearest: no calibration data, all of it held out
        return Made(pairs, result)
    # Judge the scales on data they were not fitted to: every sample that is also a
    # calibration sample (by content) leaves the held-out set, and the count is kept.
    held_out, summary["reference_overlap"] = calibration_data.held_out(pairs, result.data)
    # The searches and the verdict judge on reference batches only: the calibration batches
    # go before they start (a decoder's prompts through both phases, 68 MB of the 135 M
    # stand-in's peak); their digests stay, which say what was calibrated on.
    result.data = replace(result.data, batches=[])
    if not held_out:
        raise PipelineError(
            "every reference sample is also a calibration sample, so the accuracy gate "
            "has no held-out data; calibrate on other data than the reference inputs"
        )
    return Made(held_out, result)


def _auto(
    src: Path, dest: Path, pairs: list[accuracy.ReferenceBatch], summary: dict[str, Any], job: Job
) -> Made:
    """precision=auto: dest is the searched graph, judged as written by the search on its
    part of the held-out batches."""
    from pipeline.precision.mixed import make

    parts, found, judged = make.make(
        src,
        dest,
        pairs,
        job.criteria,
        job.holdout,
        job.precision,
        job.calibration,
        job.model,
        lambda path, batches, by: judge(path, batches, job.precision, by),
        job.engines,
    )
    summary.update(found)
    return Made(parts.search + parts.verdict, judged=judged, split=parts)


def _searched(
    dest: Path,
    made: Made,
    batches: list[accuracy.ReferenceBatch],
    summary: dict[str, Any],
    job: Job,
) -> Judgement:
    """precision.fallback=auto: the judgement, on `batches` (the search's) and under the
    search's gate, of the graph the search left in dest."""
    from pipeline.precision.fallback import cache, search

    assert made.quantized is not None, "transform() searches quantized graphs only"
    searching = job.holdout.searching(job.criteria)
    try:
        summary["fallback"], judged = cache.run(
            dest,
            made.quantized.graphs,
            summary["calibration"]["result_sha256"],
            batches,
            job.precision,
            job.calibration,
            searching,
            lambda: job.judge(dest, batches, searching=True),
        )
    except search.SearchFailed as e:
        # the plain graph's metrics still go to the metrics file
        summary.update(
            e.plain or {}, fallback={"mode": "auto", "needed": True, "error": str(e), **e.record}
        )
        raise accuracy.GateFailed(str(e), summary) from None
    return judged
