"""Every graph the int4 weight-only path writes, from one fp32 source and ModelOpt's int4
graph: the plain int4 graph and the graphs with some GEMMs kept in the source's precision.

ModelOpt's int4 graph reads each quantized GEMM's weight through one blocked
DequantizeLinear of an INT4 initializer (opset 21, `block_size`); activations are the
source's. Keeping a GEMM rewires its weight input back to the source's initializer, so
with every GEMM kept the graph computes what the source does, weight for weight. The same
duck-typed plan/graph/switchboard surface as pipeline/precision/qdq/graphs.py, so the
fallback search (pipeline/precision/fallback/search.py) runs on it unchanged."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from pipeline.graph import onnx_model, onnx_runtime
from pipeline.precision.common import ops, streamed
from pipeline.precision.common.ops import pruned
from pipeline.precision.common.searchable import Switchboard
from pipeline.precision.int4 import int8_weights

if TYPE_CHECKING:
    from onnx import ModelProto

INT4_TYPES = (22, 21)  # TensorProto.INT4, UINT4
# Which input of each op reads the weight: a GEMM's B, an embedding Gather's table.
WEIGHT_INPUT = {"MatMul": 1, "Gemm": 1, "Gather": 0}


@dataclass
class Int4Plan:
    """Which GEMMs read an int4 weight (candidates to keep), and each one's op type."""

    # node -> (the input that reads the weight, its DequantizeLinear output, source weight)
    weights: dict[str, tuple[int, str, str]]
    op_types: dict[str, str] = field(default_factory=dict)
    placement: str = "weight-only int4"

    def candidates(self) -> list[str]:
        return list(self.weights)


@dataclass
class Int4Graphs:
    source: ModelProto  # the fp32 graph ModelOpt quantized (Gemm weights untransposed)
    int4: ModelProto  # ModelOpt's int4 graph
    plan: Int4Plan
    base_dir: Path | None = None  # where the source's external-data files are
    # kept GEMMs try an int8 weight, then fp16 compute, before fp32 (fallback/written.py)
    ladder: tuple[str, ...] = ("int8", "fp16")

    @classmethod
    def of(
        cls, source: ModelProto, int4: ModelProto, block_size: int, base_dir: Path | None
    ) -> Int4Graphs:
        return cls(source, int4, plan_of(source, int4, block_size), base_dir)

    def graph(self, keep: Iterable[str] = (), int8: Iterable[str] = ()) -> Any:
        """The int4 graph with `keep` reading the source's weights, those of them in `int8`
        (GEMMs) through an int8 weight-only DequantizeLinear of it (int4/int8_weights.py)."""
        kept, in_int8 = set(keep), set(int8)
        model = copy.deepcopy(self.int4)
        nodes = {n.name: n for n in model.graph.node}
        have = {i.name for i in model.graph.initializer}
        source_inits = {i.name: i for i in self.source.graph.initializer}
        widened: dict[str, str] = {}  # source weight -> its int8 DequantizeLinear output
        for name in kept & set(self.plan.weights):
            index, _, weight = self.plan.weights[name]
            if name in in_int8:
                if weight not in widened:
                    values = streamed.weight(source_inits[weight], self.base_dir)
                    axis = int8_weights.output_axis(nodes[name])
                    widened[weight] = int8_weights.dequantize(model, weight, values, axis)
                nodes[name].input[index] = widened[weight]
                continue
            nodes[name].input[index] = weight
            if weight not in have:
                model.graph.initializer.append(copy.deepcopy(source_inits[weight]))
                have.add(weight)
        if widened:
            ops.reorder(model)  # the DequantizeLinear nodes were appended at the end
        return pruned(model)

    def fits(self, name: str, kind: str) -> bool:
        """Whether a kept candidate can take `kind` of the ladder: an int8 weight only a
        GEMM's, not a table's; fp16 any."""
        return kind != "int8" or self.plan.op_types.get(name) in ops.MATMULS

    def switchboard(self, batches: list[dict[str, np.ndarray]]) -> Switchboard:
        """One ONNX Runtime session that runs any choice of kept GEMMs: each quantized
        weight input reads Where(flag, int4 weight, source weight)."""
        from onnx import TensorProto, helper

        model = copy.deepcopy(self.int4)
        nodes = {n.name: n for n in model.graph.node}
        source_inits = {i.name: i for i in self.source.graph.initializer}
        flags: dict[str, str] = {}
        for i, (name, (index, dq_out, weight)) in enumerate(self.plan.weights.items()):
            flag, high, picked = f"int4_quantized_{i}", f"int4_source_w_{i}", f"int4_w_{i}"
            w = copy.deepcopy(source_inits[weight])
            w.name = high
            model.graph.initializer.append(w)
            model.graph.input.append(helper.make_tensor_value_info(flag, TensorProto.BOOL, []))
            model.graph.node.append(helper.make_node("Where", [flag, dq_out, high], [picked]))
            nodes[name].input[index] = picked
            flags[name] = flag
        ops.reorder(model)  # the Where nodes were appended at the end
        with onnx_runtime.model_file(model, self.base_dir) as f:
            session = onnx_runtime.ort_session(f, basic_optimizations=True)
        return Switchboard(session, flags, batches)

    def run(
        self, model: ModelProto, feeds: list[dict[str, np.ndarray]]
    ) -> list[dict[str, np.ndarray]]:
        return onnx_runtime.run_model(model, feeds, self.base_dir)


def plan_of(source: ModelProto, int4: ModelProto, block_size: int) -> Int4Plan:
    """The GEMMs (and embedding Gathers) of `int4` whose weight input is a DequantizeLinear
    of an int4 initializer, matched by name to the source node whose weight they replace."""
    producer = onnx_model.producers(int4)
    int4_inits = {i.name for i in int4.graph.initializer if i.data_type in INT4_TYPES}
    source_nodes = {n.name: n for n in source.graph.node}
    weights, op_types = {}, {}
    for node in int4.graph.node:
        index = WEIGHT_INPUT.get(node.op_type)
        if index is None or node.name not in source_nodes or len(node.input) <= index:
            continue
        dq = producer.get(node.input[index])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in int4_inits:
            continue
        weights[node.name] = (index, node.input[index], source_nodes[node.name].input[index])
        op_types[node.name] = node.op_type
    return Int4Plan(weights, op_types, f"weight-only int4, blocks of {block_size}")


class Int4WeightView(TypedDict):
    """Which GEMMs hold int4 weights and their share (calibration.json's calibration.int4)."""

    int4_gemms: list[str]
    int4_embedding_tables: list[str]  # Gathers reading an int4 table
    gemm_weight_parameters: dict[str, int]  # "int4", "higher_precision" -> parameters
    gemm_weight_bytes: dict[str, int]  # the same, as stored
    int4_weight_share: float | None  # of the parameters; None: no GEMM weight


def weight_view(model: ModelProto) -> Int4WeightView:
    """Of the graph that goes to the build: which GEMMs read an int4 weight, the share of
    GEMM weight parameters held in int4, and the bytes each precision takes."""
    inits = {i.name: i for i in model.graph.initializer}
    producer = onnx_model.producers(model)
    params = {"int4": 0, "higher_precision": 0}
    stored = {"int4": 0, "higher_precision": 0}
    int4_gemms: list[str] = []
    for node in model.graph.node:
        if node.op_type not in ops.MATMULS or len(node.input) < 2:
            continue
        dq = producer.get(node.input[1])
        if dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] in inits:
            w, kind = inits[dq.input[0]], "int4"
        elif node.input[1] in inits:
            w, kind = inits[node.input[1]], "higher_precision"
        else:
            continue  # two activations multiplied: no weight
        if kind == "int4" and w.data_type not in INT4_TYPES:
            kind = "higher_precision"
        n = int(np.prod(w.dims))
        params[kind] += n
        stored[kind] += onnx_model.tensor_bytes(w)
        if kind == "int4":
            int4_gemms.append(node.name)
    total = sum(params.values())
    tables = [
        n.name
        for n in model.graph.node
        if n.op_type == "Gather"
        and (dq := producer.get(n.input[0])) is not None
        and dq.op_type == "DequantizeLinear"
        and dq.input[0] in inits
        and inits[dq.input[0]].data_type in INT4_TYPES
    ]
    return {
        "int4_gemms": int4_gemms,
        "int4_embedding_tables": tables,
        "gemm_weight_parameters": params,
        "gemm_weight_bytes": stored,
        "int4_weight_share": round(params["int4"] / total, 4) if total else None,
    }
