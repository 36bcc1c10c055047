"""What a quantized graph goes through after its family made it and its search settled:
embedding tables in the cheapest type the gate holds in (embedding_tables.py), int4's activations in
fp16, and the view of what is quantized that calibration.json and the report show."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

import numpy as np

from pipeline.core import gate
from pipeline.graph import onnx_import, onnx_model
from pipeline.precision.calibration import cache
from pipeline.precision.gate import accuracy
from pipeline.precision.gate.judging import judge

if TYPE_CHECKING:
    from pipeline.core.config import CalibrationConfig, PrecisionConfig
    from pipeline.precision.autocast.cast import AutocastRecord
    from pipeline.precision.gemm_flops import GemmFlops, GemmWeights
    from pipeline.precision.int4.graphs import Int4WeightView
    from pipeline.records.calibration_file import TablesRecord


def cheapest_tables(
    dest: Path,
    batches: list[accuracy.ReferenceBatch],
    precision_cfg: PrecisionConfig,
    criteria: accuracy.Criteria,
) -> TablesRecord | None:
    """The quantized graph's embedding tables (embedding_tables.py) in the cheapest type the gate
    holds in, judged as written: int4 where the graph may hold int4 (precision int4, or auto
    searching int4), else fp16; what was done, None where nothing was."""
    from pipeline.precision import embedding_tables
    from pipeline.precision.int4 import rtn

    graph = onnx_model.load(dest, check=False, weights=False)
    names = embedding_tables.candidates(graph)
    if not names:
        return None
    # blocked int4 needs opset 21: a graph that holds int4 weights is there already
    int4 = onnx_model.opset(graph) >= rtn.OPSET and (
        precision_cfg.transform == "int4"
        or (precision_cfg.transform == "auto" and "int4" in precision_cfg.search_types)
    )
    failed: dict[str, list[str]] = {}
    for kind in ("int4", "fp16") if int4 else ("fp16",):
        model = type(graph)()
        model.CopyFrom(graph)
        with tempfile.TemporaryDirectory(prefix="tables.") as tmp:
            trial = Path(tmp) / "model.onnx"
            made_tables = (
                embedding_tables.in_int4(model, names, dest.parent, int(precision_cfg.block_size))
                if kind == "int4"
                else embedding_tables.in_fp16(
                    model,
                    names,
                    dest.parent,
                    embedding_tables.fp16_copies(model, names, dest.parent),
                )
            )
            cache.save_beside(made_tables, trial, dest.parent)
            del model, made_tables  # the tables' bytes go with the message (fallback/cache.py)
            judged = judge(trial, batches, precision_cfg, criteria)
            if not judged["gate_passed"]:
                failed[kind] = [gate.describe(r) for r in gate.failures(judged["gate"])]
                continue
            replace_graph(dest, trial)
        return _tables(kind, names, failed)
    return _tables("fp32", names, failed)


def _tables(kind: str, names: list[str], failed: dict[str, list[str]]) -> TablesRecord:
    made: TablesRecord = {"missed_the_gate": failed}
    made[kind] = names  # type: ignore[literal-required]  # kind: one of int4, fp16, fp32
    return made


class QuantizedView(TypedDict):
    """What calibration.json's `calibration` says of the quantized graph that goes to the
    build (added to its family's record)."""

    quantized_tensors: list[dict[str, Any]]  # each Q/DQ pair: its tensor and its readers
    gemm_flops: GemmFlops
    gemm_weights: GemmWeights
    int4: NotRequired[Int4WeightView]  # where the graph holds int4 weights


def quantized_view(dest: Path, feeds: dict[str, np.ndarray]) -> QuantizedView:
    """Of the graph that goes to the build: which tensors are quantized and who reads them,
    the share of GEMM FLOPs that reads a quantized input (int8/fp8) or weight (int4), and
    for int4 which GEMMs hold int4 weights and their share of the weights."""
    from pipeline.precision import gemm_flops
    from pipeline.precision.int4 import graphs
    from pipeline.precision.qdq import plan

    model = onnx_model.load(dest, check=False, weights=False)
    view: QuantizedView = {
        "quantized_tensors": plan.quantized_tensors(model),
        "gemm_flops": gemm_flops.summary(model, feeds),
        "gemm_weights": gemm_flops.weight_bytes(model),
    }
    if any(i.data_type in graphs.INT4_TYPES for i in model.graph.initializer):
        view["int4"] = graphs.weight_view(model)
    return view


class ActivationsRecord(TypedDict):
    """calibration.json's `activations`: the type int4's activations went to, and how."""

    type: str  # "fp16"
    autocast: AutocastRecord  # the cast that put them there


class Fp16Activations(TypedDict):
    """What fp16_activations adds to calibration.json."""

    activations: ActivationsRecord


def fp16_activations(
    dest: Path,
    first_batch: dict[str, np.ndarray],
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
) -> Fp16Activations:
    """precision.activations=fp16 for int4: AutoCast on the int4 graph the search settled on
    (its weights stay int4; scales and activations go to fp16). The search judged fp32
    activations; the graph written is judged again, as built."""
    from omegaconf import OmegaConf

    from pipeline.precision.autocast.cast import autocast

    # merge() gives a DictConfig of the same schema: still a PrecisionConfig to its readers
    cast_cfg = cast(
        "PrecisionConfig", OmegaConf.merge(precision_cfg, {"low_precision_type": "fp16"})
    )
    with tempfile.TemporaryDirectory(prefix="fp16.") as tmp:
        cast_graph = Path(tmp) / "model.onnx"
        record = autocast(dest, cast_graph, cast_cfg, calibration_cfg, first_batch)
        replace_graph(dest, cast_graph)
    return {"activations": {"type": "fp16", "autocast": record}}


def cast_tables(dest: Path, precision_cfg: PrecisionConfig) -> TablesRecord | None:
    """After AutoCast, which leaves a Gather's table in fp32: each table of values within
    precision.init_max in fp16, widened after its rows are gathered. Where the table is
    also a tied LM head, AutoCast wrote an fp16 copy of it for the head, and the Gather
    reads that copy (embedding_tables.fp16_copies): one table in the engine. The verdict
    judges the graph written, as for every weight AutoCast casts. What was done, for the
    summary; None where nothing was."""
    from pipeline.precision import embedding_tables
    from pipeline.precision.common import streamed

    model = onnx_model.load(dest, check=False, weights=False)
    inits = {i.name: i for i in model.graph.initializer}
    limit = float(precision_cfg.init_max)
    names = [
        n
        for n in embedding_tables.candidates(model)
        if float(np.abs(streamed.weight(inits[n], dest.parent)).max()) <= limit
    ]
    if not names:
        return None
    copies = embedding_tables.fp16_copies(model, names, dest.parent)
    model = embedding_tables.in_fp16(model, names, dest.parent, copies)
    with tempfile.TemporaryDirectory(prefix="tables.") as tmp:
        cache.save_beside(model, Path(tmp) / "model.onnx", dest.parent)
        replace_graph(dest, Path(tmp) / "model.onnx")
    return {"fp16": names}


def replace_graph(dest: Path, made: Path) -> None:
    """dest's graph (and its external-data files) replaced by the one at `made`."""
    for f in onnx_model.files_and_sha256(dest)[0]:
        f.unlink()
    onnx_import.copy_graph(made, dest)
