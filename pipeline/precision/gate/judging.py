"""A transformed graph judged against the fp32 reference: run with ONNX Runtime on the CPU
(fp16/bf16 emulated where the CPU build has no kernel), its figures compared and the gate
applied (gate/accuracy.py). Every search and the final verdict judge through here."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model, onnx_runtime
from pipeline.precision.gate import accuracy
from pipeline.records.calibration_file import Judgement

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.core.config import PrecisionConfig


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
