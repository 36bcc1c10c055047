"""MixedGraphs: one fp32 source and a type per GEMM (int4 weight-only, int8, fp8, fp16 or
fp32), for precision=auto (pipeline/precision/mixed/search.py).

Each low type comes from its own ModelOpt result on the same source graph (node names and
weights alike): the int4 weights from ModelOpt's int4 graph (int4/graphs.py's Int4Plan), the
int8 and fp8 scales from its Q/DQ graphs (qdq/plan.py's QdqPlan). A graph for an assignment is
written from the source: a GEMM in int4 reads its blocked DequantizeLinear weight, one in
int8/fp8 gets the Q/DQ pairs its plan gives it, one in fp16 computes in fp16 (its inputs
cast, its weights stored in fp16, its result cast back), and the rest is the source.

The search runs every assignment in one ONNX Runtime session (MixedSwitchboard): each input
of a candidate reads Where(flag, variant, ...) over its variants (made If branches, the GEMM
inside its weight's, by common/variants.py), and fp16 is emulated there (operands and result
rounded through fp16, the product in fp32, as tensor cores accumulate); the graph written
is judged again as written."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.graph import onnx_model
from pipeline.precision.common import checkpoints, ops, variants
from pipeline.precision.common.fp16_nodes import in_fp16
from pipeline.precision.int4.graphs import Int4Graphs
from pipeline.precision.qdq.plan import QdqPlan, insert_pairs, materialize

if TYPE_CHECKING:
    from onnx import ModelProto, NodeProto, TensorProto

# Cheapest weight storage first; fp32 is every node's last option.
TYPES = ("int4", "int8", "fp8", "fp16", "fp32")
BYTES_PER_PARAM = {"int4": 0.5, "int8": 1.0, "fp8": 1.0, "fp16": 2.0, "fp32": 4.0}
WEIGHT_INPUT = 1  # MatMul/Gemm B, Conv W
Assignment = Mapping[str, str]  # node -> type; a node not named is fp32


@dataclass
class MixedGraphs:
    source: ModelProto  # the fp32 graph every plan was made from, with its weights
    int4: Int4Graphs | None
    qdq: dict[str, QdqPlan]  # "int8" / "fp8" -> plan
    fp16: bool
    base_dir: Path | None = None  # where the source's external-data files are

    def candidates(self) -> list[str]:
        """GEMMs with a constant weight that some low type can take, in graph order."""
        return [
            n.name
            for n in self.source.graph.node
            if n.op_type in ops.GEMMS
            and len(n.input) > WEIGHT_INPUT
            and n.input[WEIGHT_INPUT] in self._source_inits
            and len(self.options(n.name)) > 1
        ]

    def options(self, node: str) -> list[str]:
        """The types `node` can take, cheapest weights first (fp32 last)."""
        have = {"fp32"}
        if self.int4 is not None and node in self.int4.plan.weights:
            have.add("int4")
        for kind, admitted in self._admitted.items():
            if (node, WEIGHT_INPUT) in admitted:
                have.add(kind)
        if self.fp16 and self._op_type(node) in ops.GEMMS:
            have.add("fp16")
        return [t for t in TYPES if t in have]

    def weight_bytes(self, node: str, kind: str) -> int:
        """What `node`'s weight takes stored as `kind`, its scales included."""
        weight = self._source_inits[self._nodes[node].input[WEIGHT_INPUT]]
        params = int(np.prod(weight.dims))
        data = int(np.ceil(params * BYTES_PER_PARAM[kind]))
        if kind == "int4":
            assert self.int4 is not None
            dq = self._int4_producers[self.int4.plan.weights[node][1]]
            return data + sum(
                onnx_model.tensor_bytes(self._int4_inits[x]) for x in dq.input[1:] if x
            )
        if kind in self.qdq:
            spec = self.qdq[kind].edges[(node, WEIGHT_INPUT)]
            return data + onnx_model.tensor_bytes(spec.scale)
        return data

    def graph(self, assignment: Assignment) -> Any:
        """The graph to build: each node in its assigned type."""
        int4_nodes = {n for n, t in assignment.items() if t == "int4"}
        if self.int4 is not None:
            m = self.int4.graph([n for n in self.int4.plan.weights if n not in int4_nodes])
        else:
            m = copy.deepcopy(self.source)
        for kind, plan in self.qdq.items():
            keep = [n for n in plan.candidates() if assignment.get(n) != kind]
            if len(keep) < len(plan.candidates()):
                m = materialize(m, plan, keep, label=kind)
        fp16 = [n for n, t in assignment.items() if t == "fp16"]
        if fp16:
            in_fp16(m, fp16, self.base_dir)
        return ops.pruned(m)

    def switchboard(
        self, batches: list[dict[str, np.ndarray]], narrow: bool | None = None
    ) -> MixedSwitchboard:
        """The session that judges every assignment (variants.switchboard_session; `narrow`
        None: by the model)."""
        candidates = self.candidates()
        model, flags = _switchable(self, candidates)
        session, resume = checkpoints.switchboard_session(
            model, lambda: _switchable(self, candidates)[0], self.base_dir, narrow
        )
        return MixedSwitchboard(session, flags, batches, resume)

    # The source's nodes and initializers by name, looked up for every (node, type).
    @functools.cached_property
    def _nodes(self) -> dict[str, NodeProto]:
        return {n.name: n for n in self.source.graph.node}

    @functools.cached_property
    def _source_inits(self) -> dict[str, TensorProto]:
        return {i.name: i for i in self.source.graph.initializer}

    @functools.cached_property
    def _int4_producers(self) -> dict[str, NodeProto]:
        assert self.int4 is not None
        return onnx_model.producers(self.int4.int4)

    @functools.cached_property
    def _int4_inits(self) -> dict[str, TensorProto]:
        assert self.int4 is not None
        return {i.name: i for i in self.int4.int4.graph.initializer}

    @functools.cached_property
    def _admitted(self) -> dict[str, dict[tuple[str, int], Any]]:
        return {kind: plan.admitted() for kind, plan in self.qdq.items()}

    def _op_type(self, name: str) -> str:
        return str(self._nodes[name].op_type)


@dataclass
class MixedSwitchboard:
    session: Any
    flags: dict[tuple[str, str], str]  # (node, type) -> its bool input
    batches: list[dict[str, np.ndarray]]
    resume: checkpoints.Resume | None = None  # None: a narrow one, never checkpointed

    def outputs(
        self, assignment: Assignment, which: list[int] | None = None
    ) -> list[dict[str, np.ndarray]]:
        """The outputs of `assignment` on the batches `which` (all: None), from a
        checkpoint where one is open (checkpointed()) and applies."""
        on = {flag: assignment.get(node) == kind for (node, kind), flag in self.flags.items()}
        return checkpoints.run(self.session, self.resume, on, self.batches, which)

    def checkpointed(self, which: list[int], expected_s: float) -> ContextManager[None]:
        """Inside, runs on the batches `which` start from the all-fp32 graph's activations
        at the latest cut before their first switched GEMM (common/checkpoints.py), where
        that saves more than the cuts' sessions cost, for runs that take `expected_s`
        whole."""
        flags = list(self.flags.values())
        return checkpoints.opened(self.resume, flags, self.batches, which, expected_s)


def _switchable(
    graphs: MixedGraphs, candidates: list[str]
) -> tuple[Any, dict[tuple[str, str], str]]:
    """One graph in which flags pick each candidate's type (see the module's docstring)."""
    from onnx import TensorProto, helper

    m, int4_weight = _with_source_weights(graphs)
    nodes = {n.name: n for n in m.graph.node}
    dq = {
        kind: insert_pairs(
            m, nodes, {e: s for e, s in plan.admitted().items() if e[0] in candidates}, kind
        )
        for kind, plan in graphs.qdq.items()
    }
    flags: dict[tuple[str, str], str] = {}
    for node in candidates:
        for kind in graphs.options(node)[:-1]:
            flags[(node, kind)] = f"use::{kind}::{node}"
            m.graph.input.append(
                helper.make_tensor_value_info(flags[(node, kind)], TensorProto.BOOL, [])
            )
    for node in candidates:
        n = nodes[node]
        for idx, x in enumerate(list(n.input)):
            choices = [(k, dq[k][(node, idx)]) for k in dq if (node, idx) in dq[k]]
            if idx == WEIGHT_INPUT and node in int4_weight:
                choices.insert(0, ("int4", int4_weight[node]))
            if (node, "fp16") in flags and x:
                choices.append(("fp16", _rounded(m, x, f"{x}::fp16::{node}::{idx}")))
            picked = x
            for kind, tensor in reversed(choices):
                picked = _where(m, flags[(node, kind)], tensor, picked)
            n.input[idx] = picked
        if (node, "fp16") in flags:
            for i, out in enumerate(list(n.output)):
                n.output[i] = f"{out}::raw"
                rounded = _rounded(m, n.output[i], f"{out}::fp16")
                m.graph.node.append(variants.pick(flags[(node, "fp16")], rounded, n.output[i], out))
    ops.reorder(m)
    return m, flags


def _with_source_weights(graphs: MixedGraphs) -> tuple[Any, dict[str, str]]:
    """The int4 graph (or the source) with every GEMM reading its source weight, the int4
    DequantizeLinear outputs left in place; node -> its int4 weight tensor."""
    if graphs.int4 is None:
        return copy.deepcopy(graphs.source), {}
    m = copy.deepcopy(graphs.int4.int4)
    nodes = {n.name: n for n in m.graph.node}
    have = {i.name for i in m.graph.initializer}
    source_inits = {i.name: i for i in graphs.source.graph.initializer}
    out = {}
    for name, (index, dq_out, weight) in graphs.int4.plan.weights.items():
        nodes[name].input[index] = weight
        if weight not in have:
            m.graph.initializer.append(copy.deepcopy(source_inits[weight]))
            have.add(weight)
        out[name] = dq_out
    return m, out


def _rounded(m: ModelProto, tensor: str, name: str) -> str:
    """`tensor` through fp16 and back: the values an fp16 kernel reads or writes."""
    from onnx import TensorProto, helper

    m.graph.node.append(helper.make_node("Cast", [tensor], [f"{name}::h"], to=TensorProto.FLOAT16))
    m.graph.node.append(helper.make_node("Cast", [f"{name}::h"], [name], to=TensorProto.FLOAT))
    return name


def _where(m: ModelProto, flag: str, yes: str, no: str) -> str:
    node = variants.pick(flag, yes, no)
    m.graph.node.append(node)
    return str(node.output[0])
