"""The strongly typed precision transform done before the build.
fp32/tf32 leave the graph alone; fp16/bf16 go through ModelOpt AutoCast;
int8/fp8 through ModelOpt post-training quantization (explicit Q/DQ)."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from pipeline.core import calibration_file, fileio, hashing
from pipeline.core import gate as gate_lib
from pipeline.core.calibration_file import CalibrationSummary, Judgement
from pipeline.core.errors import PipelineError
from pipeline.core.layout import CALIBRATION_SUMMARY, GRAPH, REFERENCE
from pipeline.export import export
from pipeline.graph import onnx_import, onnx_model, onnx_runtime
from pipeline.inputs import reference_file
from pipeline.precision.calibration import cache as calibration_cache
from pipeline.precision.gate import accuracy, tasks

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.core.config import CalibrationConfig, ModelConfig, PrecisionConfig
    from pipeline.precision.calibration.result import QuantizeResult


def evaluate(
    onnx_path: Path, model: ModelProto, batches: list[dict[str, np.ndarray]], made_by: str = ""
) -> tuple[list[dict[str, np.ndarray]], str]:
    """Outputs of the transformed graph, and how they were obtained: natively where
    ONNX Runtime's CPU build has the kernels, else with fp16/bf16 emulated. A failure
    says which transform (`made_by`) made the graph and which node failed."""
    try:
        return onnx_runtime.run_batches(onnx_path, batches), "onnxruntime (cpu)"
    except PipelineError as e:
        from pipeline.precision.gate import emulate

        kinds = emulate.low_precision_types(model)
        if "NOT_IMPLEMENTED" not in str(e) or not kinds:
            raise PipelineError(transformed_failure(str(e), made_by)) from None
        # the weights are read only here, where they are rewritten to fp32
        emulated = emulate.emulated_fp32(onnx_model.load(onnx_path, check=False))
        with tempfile.TemporaryDirectory() as tmp:
            em = Path(tmp) / "emulated.onnx"
            onnx_model.save(emulated, em)
            del emulated
            outs = onnx_runtime.run_batches(em, batches)
        return outs, (
            f"onnxruntime (cpu) with {'/'.join(kinds)} emulated: every {'/'.join(kinds)} tensor rounded "
            f"to its type, ops computed in fp32 (the CPU build has no {'/'.join(kinds)} kernels for "
            f"some ops)"
        )


def transformed_failure(error: str, made_by: str) -> str:
    """ONNX Runtime's failure on a transformed graph, said as what it is: the exported fp32
    graph ran (the export stage made the reference with it), the transform's graph does not."""
    detail = error.split(": ", 1)[-1]
    node = re.search(r"Name:'([^']*)'", error)
    where = f" at node '{node.group(1)}'" if node else ""
    keep = (
        f"; keep that node in fp32 with precision.keep_fp32_nodes=[{node.group(1)}]"
        if node and "AutoCast" in made_by
        else ""
    )
    return (
        f"ONNX Runtime cannot run the graph {made_by or 'the precision transform'} made from "
        f"the exported model (which runs){where}: {detail}{keep}"
    )


def made_by(precision_cfg: PrecisionConfig) -> str:
    """Who made the calibrated graph, for messages: 'AutoCast (fp16)', 'ModelOpt Q/DQ (int8)'."""
    if precision_cfg.transform == "autocast":
        return f"AutoCast ({precision_cfg.low_precision_type})"
    if precision_cfg.transform == "qdq":
        return f"ModelOpt Q/DQ ({precision_cfg.quantize_mode})"
    if precision_cfg.transform == "int4":
        return f"ModelOpt int4 ({precision_cfg.int4_method})"
    if precision_cfg.transform == "auto":
        return f"precision=auto ({', '.join(precision_cfg.search_types)} and fp32 per GEMM)"
    return "the precision transform"


def transform(
    export_dir: Path,
    out_dir: Path,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
) -> CalibrationSummary:
    """Write out_dir/model.onnx (the graph TensorRT will build) and calibration.json.
    A graph that misses the gate raises accuracy.GateFailed, carrying every metric."""
    src = export_dir / GRAPH
    pairs = reference_file.read(export_dir / REFERENCE)
    if not pairs:
        raise PipelineError(f"no reference batches in {export_dir / 'reference.npz'}; rerun export")
    # What the gate judges by, checked before any work.
    reference = export.reference_info(export_dir)
    criteria = accuracy.Criteria.of(precision_cfg, model_cfg, bool(reference.get("random")))
    criteria.tasks.check_outputs(list(tasks.split_labels(pairs[0][1])[0]))
    with fileio.staged_dir(out_dir) as tmp:
        dest = tmp / "model.onnx"
        summary: dict[str, Any] = {
            "precision": precision_cfg.name,
            "transform": precision_cfg.transform,
            "source_sha256": hashing.sha256_file(src),
            "reference": reference,
        }
        made = _make_graph(
            src, dest, pairs, summary, criteria, precision_cfg, calibration_cfg, model_cfg
        )
        if made.quantized is not None and precision_cfg.fallback != "none":
            summary.update(_searched(dest, made, summary, precision_cfg, calibration_cfg, criteria))
        else:  # precision=auto judged what it wrote already
            summary.update(made.judged or judge(dest, made.held_out, precision_cfg, criteria))
        if precision_cfg.transform == "int4" and precision_cfg.activations == "fp16":
            summary.update(_fp16_activations(dest, made, summary, precision_cfg, calibration_cfg))
            summary.update(judge(dest, made.held_out, precision_cfg, criteria))
        if made.quantized is not None or precision_cfg.transform == "auto":
            if summary["gate_passed"]:
                summary.update(_tables(dest, made, precision_cfg, criteria))
            summary["calibration"].update(quantized_view(dest, made.held_out[0][0]))
        files, summary["onnx_sha256"] = onnx_model.files_and_sha256(dest)
        # the build takes the graph's hash from here while the files are unchanged (one read)
        summary["onnx_files"] = onnx_model.file_stats(files)
        accuracy.raise_on_failure(summary["gate"], f"{precision_cfg.name} ONNX", summary)
        # a record now: the writer refuses one lacking a required field
        record = cast(CalibrationSummary, summary)
        calibration_file.write(tmp / CALIBRATION_SUMMARY, record)
    return record


@dataclass
class Made:
    held_out: list[accuracy.ReferenceBatch]  # the reference batches the gate judges by
    quantized: QuantizeResult | None = None  # of a strongly typed Q/DQ (or int4) graph
    judged: Judgement | None = None  # the written graph's judgement, where made judged it


def _make_graph(
    src: Path,
    dest: Path,
    pairs: list[accuracy.ReferenceBatch],
    summary: dict[str, Any],
    criteria: accuracy.Criteria,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
) -> Made:
    """dest, the graph the precision asks for; what it adds to the summary goes there."""
    if precision_cfg.mode == "weak":
        # TensorRT 10 weak typing: the graph stays fp32, builder flags pick the precision.
        from pipeline.precision import weak_precision

        info = weak_precision.prepare(src, dest.parent, precision_cfg, calibration_cfg, model_cfg)
        summary.update(transform="none", weak_typing=info)
        onnx_import.copy_graph(src, dest)
        return Made(pairs)
    if precision_cfg.transform == "none":
        onnx_import.copy_graph(src, dest)
        return Made(pairs)
    if precision_cfg.transform == "autocast":
        # The first reference batch tells AutoCast real activation ranges; the rest are held out.
        from pipeline.precision.autocast import cast as autocast

        summary["autocast"] = autocast.autocast(
            src, dest, precision_cfg, calibration_cfg, pairs[0][0]
        )
        return Made(pairs[1:] if len(pairs) > 1 else pairs)
    if precision_cfg.transform == "auto":
        return _auto(src, dest, pairs, summary, criteria, precision_cfg, calibration_cfg, model_cfg)
    from pipeline.precision.calibration import data as calibration_data
    from pipeline.precision.int4 import quantize as int4
    from pipeline.precision.qdq import quantize

    make = int4.quantize_int4 if precision_cfg.transform == "int4" else quantize.quantize
    result = make(src, dest, precision_cfg, calibration_cfg, model_cfg)
    summary["calibration"] = result.summary
    if result.data is None:  # int4 round-to-nearest: no calibration data, all of it held out
        return Made(pairs, result)
    # Judge the scales on data they were not fitted to: every sample that is also a
    # calibration sample (by content) leaves the held-out set, and the count is kept.
    held_out, summary["reference_overlap"] = calibration_data.held_out(pairs, result.data)
    if not held_out:
        raise PipelineError(
            "every reference sample is also a calibration sample, so the accuracy gate "
            "has no held-out data; calibrate on other data than the reference inputs"
        )
    return Made(held_out, result)


def _auto(
    src: Path,
    dest: Path,
    pairs: list[accuracy.ReferenceBatch],
    summary: dict[str, Any],
    criteria: accuracy.Criteria,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
) -> Made:
    """precision=auto: dest is the searched graph, judged as written by the search."""
    from pipeline.precision.mixed import make as mixed

    held, found, judged = mixed.make(
        src,
        dest,
        pairs,
        criteria,
        precision_cfg,
        calibration_cfg,
        model_cfg,
        lambda path, held_out: judge(path, held_out, precision_cfg, criteria),
    )
    summary.update(found)
    return Made(held, judged=judged)


def _searched(
    dest: Path,
    made: Made,
    summary: dict[str, Any],
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    criteria: accuracy.Criteria,
) -> Judgement:
    """precision.fallback=auto: the judgement of the graph the search left in dest."""
    from pipeline.precision.fallback import cache as fallback_cache
    from pipeline.precision.fallback import search as fallback

    assert made.quantized is not None, "transform() searches quantized graphs only"

    try:
        summary["fallback"], judged = fallback_cache.run(
            dest,
            made.quantized.graphs,
            summary["calibration"]["result_sha256"],
            made.held_out,
            precision_cfg,
            calibration_cfg,
            criteria,
            lambda: judge(dest, made.held_out, precision_cfg, criteria),
        )
    except fallback.SearchFailed as e:
        # the plain graph's metrics still go to the metrics file
        summary.update(
            e.plain or {}, fallback={"mode": "auto", "needed": True, "error": str(e), **e.record}
        )
        raise accuracy.GateFailed(str(e), summary) from None
    return judged


def _tables(
    dest: Path, made: Made, precision_cfg: PrecisionConfig, criteria: accuracy.Criteria
) -> dict[str, Any]:
    """The quantized graph's embedding tables (tables.py) in the cheapest type the gate
    holds in, judged as written: int4 where the graph may hold int4 (precision int4, or auto
    searching int4), else fp16; its judgement, and `tables` saying what was done."""
    from pipeline.precision import tables
    from pipeline.precision.int4 import rtn as streamed_int4

    graph = onnx_model.load(dest, check=False, weights=False)
    names = tables.candidates(graph)
    if not names:
        return {}
    # blocked int4 needs opset 21: a graph that holds int4 weights is there already
    int4 = onnx_model.opset(graph) >= streamed_int4.OPSET and (
        precision_cfg.transform == "int4"
        or (precision_cfg.transform == "auto" and "int4" in precision_cfg.search_types)
    )
    failed = {}
    for kind in ("int4", "fp16") if int4 else ("fp16",):
        model = onnx_model.load(dest, check=False, weights=False)
        with tempfile.TemporaryDirectory(prefix="tables.") as tmp:
            trial = Path(tmp) / "model.onnx"
            made_tables = (
                tables.in_int4(model, names, dest.parent, int(precision_cfg.block_size))
                if kind == "int4"
                else tables.in_fp16(model, names, dest.parent)
            )
            calibration_cache.save_beside(made_tables, trial, dest.parent)
            judged = judge(trial, made.held_out, precision_cfg, criteria)
            if not judged["gate_passed"]:
                failed[kind] = [gate_lib.describe(r) for r in gate_lib.failures(judged["gate"])]
                continue
            _replace_graph(dest, trial)
        return {**judged, "tables": {kind: names, "missed_the_gate": failed}}
    return {"tables": {"fp32": names, "missed_the_gate": failed}}


def quantized_view(dest: Path, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    """Of the graph that goes to the build: which tensors are quantized and who reads them,
    the share of GEMM FLOPs that reads a quantized input (int8/fp8) or weight (int4), and
    for int4 which GEMMs hold int4 weights and their share of the weights."""
    from pipeline.precision import gemm_flops
    from pipeline.precision.int4 import graphs as int4_graphs
    from pipeline.precision.qdq import plan as qdq_plan

    model = onnx_model.load(dest, check=False, weights=False)
    view = {
        "quantized_tensors": qdq_plan.quantized_tensors(model),
        "gemm_flops": gemm_flops.summary(model, feeds),
        "gemm_weights": gemm_flops.weight_bytes(model),
    }
    if any(i.data_type in int4_graphs.INT4_TYPES for i in model.graph.initializer):
        view["int4"] = int4_graphs.weight_view(model)
    return view


def _fp16_activations(
    dest: Path,
    made: Made,
    summary: dict[str, Any],
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
) -> dict[str, Any]:
    """precision.activations=fp16 for int4: AutoCast on the int4 graph the search settled on
    (its weights stay int4; scales and activations go to fp16). The search judged fp32
    activations; the graph written is judged again, as built."""
    from omegaconf import OmegaConf

    from pipeline.precision.autocast import cast as autocast

    # merge() gives a DictConfig of the same schema: still a PrecisionConfig to its readers
    cast_cfg = cast(
        "PrecisionConfig", OmegaConf.merge(precision_cfg, {"low_precision_type": "fp16"})
    )
    with tempfile.TemporaryDirectory(prefix="fp16.") as tmp:
        cast_graph = Path(tmp) / "model.onnx"
        record = autocast.autocast(dest, cast_graph, cast_cfg, calibration_cfg, made.held_out[0][0])
        _replace_graph(dest, cast_graph)
    return {"activations": {"type": "fp16", "autocast": record}}


def _replace_graph(dest: Path, made: Path) -> None:
    """dest's graph (and its external-data files) replaced by the one at `made`."""
    for f in onnx_model.files_and_sha256(dest)[0]:
        f.unlink()
    onnx_import.copy_graph(made, dest)


def judge(
    dest: Path,
    held_out: list[accuracy.ReferenceBatch],
    precision_cfg: PrecisionConfig,
    criteria: accuracy.Criteria,
) -> Judgement:
    """The transformed graph's outputs against the fp32 reference, and the gate."""
    model = onnx_model.load(dest, check=False, weights=False)
    got, evaluated = evaluate(dest, model, [p[0] for p in held_out], made_by(precision_cfg))
    figures, gate = criteria.judge([p[1] for p in held_out], got)
    return {
        "evaluated_with": evaluated,
        "accuracy": figures,
        "gate": gate,
        "gate_passed": accuracy.passed(gate),
        "held_out_batches": len(held_out),
        "ops": onnx_model.op_histogram(model),
        # the build resolves its profiles from these, without parsing every weight again
        "inputs": [
            {"name": i.name, "dtype": i.dtype, "dims": list(i.dims)}
            for i in onnx_model.inputs(model)
        ],
    }
