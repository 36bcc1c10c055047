"""precision=auto's objective, engine_bytes: what the plan TensorRT writes costs, not what
its weights would take.

A plan holds each weight once, in its type, and code per engine layer besides; on a CNN of
many small convolutions an int8 layer's code outweighs the bytes its weight saves (the
PP-OCRv4 detector: every convolution int8 gave an engine 2.4x the fp16 one). The model here
is learnt from builds of this machine's TensorRT (precision/common/engine_cost.py hands
them over): the fp32 engine, the fp16 engine (precision=fp16's graph), and, per type the
search may give, the graph with every GEMM it fits in that type. A GEMM in type t then
costs its weight in t plus `code[t]`, the bytes each such layer added in that build beyond
the weights it changed:

    code[t] = (engine(all t) - engine(fp32) - sum of the weight bytes t changes) / GEMMs in t

The search minimises the predicted engine; the graph it chooses is built and measured, and
where neither the prediction could nor the build does come under the fp16 engine, the
answer is the fp16 graph, with one line saying why."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from pipeline.core import console
from pipeline.precision.common.engine_cost import EngineCost
from pipeline.records.calibration_file import Judgement

if TYPE_CHECKING:
    from pipeline.core.config import PrecisionConfig
    from pipeline.precision.mixed.graphs import MixedGraphs

# The prediction is held to the build of the graph chosen; further off than this it is
# said in the record (the choice still stands against the built fp16 engine).
HOLDS_WITHIN = 0.15


class EngineRecord(TypedDict):
    """The engine model as the search's record keeps it (`engine`; EngineModel.record)."""

    objective: str  # "engine_bytes"
    measured_with: str
    fp32_engine_bytes: int
    fp16_engine_bytes: int
    single_type_engine_bytes: dict[str, int]  # type -> the engine with every GEMM it fits in it
    code_bytes_per_gemm: dict[str, int]  # type -> bytes a GEMM in it adds beyond its weight


class EngineCheck(TypedDict):
    """The prediction held to the build of the chosen graph (added to the record's `engine`)."""

    predicted_engine_bytes: int
    engine_bytes: int  # as built
    prediction_off: float  # |built - predicted| / built
    prediction_held: bool  # off by HOLDS_WITHIN at most
    vs_fp16: float | None  # built / the fp16 engine's bytes


@dataclass
class EngineModel:
    """The engine bytes of an assignment, predicted from builds (see the module's doc)."""

    fp32: int  # the fp32 engine of the exported graph
    fp16: int  # the fp16 engine (precision=fp16's graph)
    code: dict[str, float]  # type -> bytes per GEMM beyond its weight
    single: dict[str, int] = field(default_factory=dict)  # type -> its all-GEMMs engine
    measured_with: str = ""

    def floor(self, graphs: MixedGraphs, options: dict[str, list[str]]) -> float:
        """The least any assignment is predicted to cost: each GEMM in its cheapest type,
        whatever the gate says."""
        return self.fp32 + sum(
            min(self._delta(graphs, n, t) for t in kinds) for n, kinds in options.items()
        )

    def predicted(self, graphs: MixedGraphs, assignment: dict[str, str]) -> float:
        return self.fp32 + sum(self._delta(graphs, n, t) for n, t in assignment.items())

    def _delta(self, graphs: MixedGraphs, node: str, kind: str) -> float:
        if kind == "fp32":
            return 0.0
        saved = graphs.weight_bytes(node, kind) - graphs.weight_bytes(node, "fp32")
        return saved + self.code[kind]

    def record(self) -> EngineRecord:
        return {
            "objective": "engine_bytes",
            "measured_with": self.measured_with,
            "fp32_engine_bytes": self.fp32,
            "fp16_engine_bytes": self.fp16,
            "single_type_engine_bytes": self.single,
            "code_bytes_per_gemm": {k: round(v) for k, v in self.code.items()},
        }


def fit(
    graphs: MixedGraphs, options: dict[str, list[str]], engines: EngineCost
) -> EngineModel | None:
    """The model, from the references (measured by now) and one build per type; None (with
    a line) where a build it needs cannot be made, and the search weighs weight bytes."""
    refs = engines.references
    if "fp16" not in refs or "fp32" not in refs:
        console.note(
            "precision=auto weighs GEMM weight bytes: the fp16 and fp32 engines of this graph "
            "could not be measured here"
        )
        return None
    model = EngineModel(
        refs["fp32"]["bytes"], refs["fp16"]["bytes"], {}, measured_with=engines.measured_with
    )
    kinds = sorted({t for o in options.values() for t in o if t != "fp32"})
    with tempfile.TemporaryDirectory(prefix="auto-engines.") as tmp:
        for kind in kinds:
            nodes = [n for n, o in options.items() if kind in o]
            path = Path(tmp) / kind / "model.onnx"
            path.parent.mkdir()
            from pipeline.precision.calibration import cache

            single = dict.fromkeys(nodes, kind)
            cache.save_beside(graphs.graph(single), path, graphs.base_dir or path.parent)
            got = engines.size_of(path, f"the graph with every GEMM in {kind}")
            if got is None:
                console.note(
                    f"precision=auto weighs GEMM weight bytes: the all-{kind} engine failed"
                )
                return None
            model.single[kind] = got["bytes"]
            changed = sum(
                graphs.weight_bytes(n, kind) - graphs.weight_bytes(n, "fp32") for n in nodes
            )
            model.code[kind] = (got["bytes"] - model.fp32 - changed) / len(nodes)
    return model


def checked(model: EngineModel, predicted: float, built: int) -> EngineCheck:
    """The prediction against the build of the chosen graph."""
    off = abs(built - predicted) / built if built else 0.0
    return {
        "predicted_engine_bytes": round(predicted),
        "engine_bytes": built,
        "prediction_off": round(off, 4),
        "prediction_held": off <= HOLDS_WITHIN,
        "vs_fp16": round(built / model.fp16, 4) if model.fp16 else None,
    }


def model_for(
    precision_cfg: PrecisionConfig,
    engines: EngineCost | None,
    graphs: MixedGraphs,
    options: dict[str, list[str]],
    src: Path,
    first_batch: dict[str, np.ndarray],
) -> EngineModel | None:
    """The engine-bytes model where the objective asks for it and builds can be made;
    `src` (the exported graph) and `first_batch` make the fp16 reference as precision=fp16
    would."""
    if precision_cfg.objective != "engine_bytes" or not options:
        return None
    if engines is None:
        console.note(
            "precision=auto weighs GEMM weight bytes: no TensorRT here measures engines "
            "(precision.objective=engine_bytes needs one)"
        )
        return None
    engines.measure_references(src.parent, first_batch)
    return fit(graphs, options, engines)


def fp16_first(
    model: EngineModel | None,
    graphs: MixedGraphs,
    options: dict[str, list[str]],
    fp16: Callable[[], Judgement],
) -> tuple[dict[str, Any], Judgement] | None:
    """Where no assignment can be predicted under the fp16 engine, the fp16 graph (written
    to dest and judged) is the answer before any search, if it passes; else None."""
    if model is None:
        return None
    floor = model.floor(graphs, options)
    if floor < model.fp16:
        return None
    final = fp16()
    if not final["gate_passed"]:
        return None
    why = (
        f"no type per GEMM can make the engine smaller than the fp16 engine: at best "
        f"{floor / 1e6:.3g} MB predicted against fp16's {model.fp16 / 1e6:.3g} MB (each "
        f"quantized layer's code outweighs its weight's saving); the answer is the fp16 graph"
    )
    console.note(f"precision=auto: {why}")
    record = {"mode": "auto", "answer": "fp16", "why": why, "candidates": len(options)}
    return {**record, "engine": model.record(), "graphs_judged": 1}, final


def settled(
    model: EngineModel,
    graphs: MixedGraphs,
    assignment: dict[str, str],
    record: dict[str, Any],
    engines: EngineCost,
    dest: Path,
    final: Judgement,
    fp16: Callable[[], Judgement],
) -> Judgement:
    """The chosen graph's engine, built and held to the fp16 engine: where it is not
    smaller and the fp16 graph passes, the fp16 graph is the answer (dest holds it)."""
    built = engines.size_of(dest, "the graph precision=auto chose")
    record["engine"] = model.record()
    if built is None:
        return final
    record["engine"].update(checked(model, model.predicted(graphs, assignment), built["bytes"]))
    if built["bytes"] < model.fp16:
        return final
    kept = dest.read_bytes()
    answer = fp16()
    if not answer["gate_passed"]:
        dest.write_bytes(kept)  # the mixed graph stays: the fp16 one misses the gate
        return final
    why = (
        f"the chosen types' engine is {built['bytes'] / model.fp16:.2f}x the fp16 engine "
        f"({built['bytes'] / 1e6:.3g} MB against {model.fp16 / 1e6:.3g} MB); the answer is the "
        f"fp16 graph"
    )
    console.note(f"precision=auto: {why}")
    record.update(answer="fp16", why=why)
    return answer
