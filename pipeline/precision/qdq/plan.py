"""QdqPlan: what ModelOpt decided (a scale for each quantized edge), apart from where
the Q/DQ pairs go, so that placement and "keep this node in fp32" are exact rewrites of
the fp32 graph rather than edits of ModelOpt's.

An edge is (consumer node, input index). ModelOpt's graph tells, for every edge that
reads a DequantizeLinear, the scale, zero point and axis it chose. `materialize` then
writes the *fp32 source graph* with a Q/DQ pair on exactly the edges the placement
admits and the caller does not keep:

- `gemm_inputs`: only the inputs of the ops TensorRT runs in int8/fp8 (MatMul, Gemm,
  Conv, ConvTranspose) read the quantized value. Every other reader of the tensor (a
  residual Add, Mul, Concat, LayerNorm, ...) reads the unquantized one. TensorRT still
  runs data movement between GEMMs (Reshape, Transpose, MaxPool, ...) in int8 by moving
  Q/DQ across it; what it gives up is fusing a residual Add into a convolution's int8
  output, which the accuracy of transformers cannot afford (their residual stream
  carries outlier dimensions).
- `modelopt`: every edge ModelOpt quantized, as ModelOpt placed them.

Readers that only look at shapes (Shape, Size) never read a quantized value: the result
is the same and the keep-everything graph stays the fp32 graph. Weights always come
from the source graph (ModelOpt stores some as int8: never dequantized back), so with
every node kept the graph is the source graph, node for node, and its outputs are the
fp32 graph's bit for bit."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model, tied_weights
from pipeline.graph.onnx_model import opset
from pipeline.precision.common import variants
from pipeline.precision.common.ops import GEMMS, reorder

if TYPE_CHECKING:
    from onnx import ModelProto, TensorProto

PLACEMENTS = ("gemm_inputs", "modelopt")
SHAPE_ONLY = ("Shape", "Size")
QDQ = ("QuantizeLinear", "DequantizeLinear")
# Q/DQ attributes by the opset that introduced them: a graph of a lower opset drops them.
_ATTR_OPSET = {"axis": 13, "saturate": 19, "block_size": 21, "output_dtype": 21}


@dataclass(frozen=True)
class QSpec:
    """One Q/DQ pair as ModelOpt made it: scale and zero point (TensorProtos, by value)
    and the attributes of each node."""

    scale: Any
    zero_point: Any | None
    q_attrs: tuple[tuple[str, int], ...]
    dq_attrs: tuple[tuple[str, int], ...]

    def digest(self) -> str:
        h = hashlib.sha256(self.scale.SerializeToString())
        if self.zero_point is not None:
            h.update(self.zero_point.SerializeToString())
        h.update(repr((self.q_attrs, self.dq_attrs)).encode())
        return h.hexdigest()


@dataclass
class QdqPlan:
    edges: dict[tuple[str, int], QSpec]
    op_types: dict[str, str]  # consumer node name -> op type
    opset: int  # the default-domain opset the Q/DQ nodes need
    placement: str = "gemm_inputs"

    def admitted(self) -> dict[tuple[str, int], QSpec]:
        """The edges this placement quantizes."""
        return {
            e: s
            for e, s in self.edges.items()
            if self.placement == "modelopt" or self.op_types[e[0]] in GEMMS
        }

    def candidates(self) -> list[str]:
        """Nodes that read a quantized value: what "keep in fp32" can name, in graph order."""
        return list(dict.fromkeys(node for node, _ in self.admitted()))


def constants(model: ModelProto) -> dict[str, TensorProto]:
    """Initializers and Constant-node values by tensor name (ModelOpt uses both)."""
    from onnx import numpy_helper

    out = {i.name: i for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            t = n.attribute[0].t
            out[n.output[0]] = numpy_helper.from_array(numpy_helper.to_array(t), n.output[0])
    return out


def _attrs(node: Any) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((a.name, int(a.i)) for a in node.attribute if a.name in _ATTR_OPSET))


def extract(qdq_model: ModelProto, source: ModelProto, placement: str) -> QdqPlan:
    """The plan behind ModelOpt's Q/DQ graph, mapped onto `source` by node name."""
    if placement not in PLACEMENTS:
        raise PipelineError(
            f"precision.qdq_placement={placement} is not one of {', '.join(PLACEMENTS)}"
        )
    consts = constants(qdq_model)
    producer = onnx_model.producers(qdq_model)
    src_nodes = {n.name: n for n in source.graph.node}
    edges: dict[tuple[str, int], QSpec] = {}
    op_types: dict[str, str] = {}
    for node in qdq_model.graph.node:
        if node.op_type in QDQ:
            continue
        for idx, name in enumerate(node.input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            if node.op_type in SHAPE_ONLY:
                continue
            src = src_nodes.get(node.name)
            if src is None or src.op_type != node.op_type or idx >= len(src.input):
                raise PipelineError(
                    f"ModelOpt's Q/DQ graph has a node {node.name!r} ({node.op_type}) reading a "
                    f"quantized value that the source graph does not have; its edges cannot be "
                    f"placed on the fp32 graph"
                )
            q = producer.get(dq.input[0])
            scale = consts.get(dq.input[1])
            zero = consts.get(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
            if scale is None:
                raise PipelineError(f"ModelOpt's {dq.name} has no constant scale")
            q_attrs = _attrs(q) if q is not None and q.op_type == "QuantizeLinear" else _attrs(dq)
            edges[(node.name, idx)] = QSpec(scale, zero, q_attrs, _attrs(dq))
            op_types[node.name] = node.op_type
    return QdqPlan(edges, op_types, opset(qdq_model), placement)


def materialize(
    source: ModelProto, plan: QdqPlan, keep: Iterable[str] = (), label: str = "qdq"
) -> Any:
    """A copy of `source` with a Q/DQ pair on each admitted edge whose node is not kept.
    One pair per (tensor, scale): the Q/K/V MatMuls reading one tensor share it. `label`
    names the pairs (plans applied one after another to one graph need their own)."""
    kept = set(keep)
    m = _copy_for(source, plan)
    nodes = {n.name: n for n in m.graph.node}
    # an edge whose node is absent: a smoothing Mul of a group left unsmoothed
    edges = {e: s for e, s in plan.admitted().items() if e[0] not in kept and e[0] in nodes}
    dq = insert_pairs(m, nodes, edges, label)
    for (name, idx), tensor in dq.items():
        nodes[name].input[idx] = tensor
    if dq:
        reorder(m)
    return m


def switchable(
    source: ModelProto, plan: QdqPlan, kept_inputs: dict[str, list[str]], in_place: bool = False
) -> tuple[Any, dict[str, str]]:
    """One graph for a whole search: each candidate reads its quantized inputs while its
    flag (a scalar bool graph input) is true, else `kept_inputs[node]` (what it reads when
    kept in fp32). Where only selects, so every flag setting computes what the graph
    materialize writes for it, and one ONNX Runtime session serves every step. `in_place`:
    `source` is the caller's to give up and becomes the graph (its weights not copied)."""
    import onnx

    m = _opset_checked(source, plan) if in_place else _copy_for(source, plan)
    nodes = {n.name: n for n in m.graph.node}
    edges = {e: s for e, s in plan.admitted().items() if e[0] in nodes}
    dq = insert_pairs(m, nodes, edges)
    flags = {node: f"quantize::{node}" for node in dict.fromkeys(n for n, _ in edges)}
    for flag in flags.values():
        m.graph.input.append(onnx.helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, []))
    for (name, idx), tensor in dq.items():
        picked = f"{tensor}::{name}::{idx}"
        m.graph.node.append(variants.pick(flags[name], tensor, kept_inputs[name][idx], picked))
        nodes[name].input[idx] = picked
    reorder(m)
    return m, flags


def _copy_for(source: ModelProto, plan: QdqPlan) -> Any:
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(source)
    return _opset_checked(m, plan)


def _opset_checked(m: ModelProto, plan: QdqPlan) -> Any:
    target = opset(m)
    if target < plan.opset and not _qdq_fits(plan, target):
        raise PipelineError(
            f"the Q/DQ nodes need opset {plan.opset}; the graph has {target} (convert it first)"
        )
    return m


def insert_pairs(
    m: ModelProto, nodes: dict[str, Any], edges: dict[tuple[str, int], QSpec], label: str = "qdq"
) -> dict[tuple[str, int], str]:
    """Add a Q/DQ pair for each (tensor, spec) among `edges`; the DequantizeLinear output
    each edge should read. Nodes go at the graph's end (reorder places them)."""
    import onnx

    target = opset(m)
    pairs: dict[tuple[str, str], str] = {}
    out: dict[tuple[str, int], str] = {}
    for (name, idx), spec in edges.items():
        tensor = nodes[name].input[idx]
        key = (tensor, spec.digest())
        if key not in pairs:
            tag = f"{tensor}_{label}{len([k for k in pairs if k[0] == tensor]) or ''}"
            scale = onnx.TensorProto()
            scale.CopyFrom(spec.scale)
            scale.name = f"{tag}_scale"
            q_in = [tensor, scale.name]
            m.graph.initializer.append(scale)
            if spec.zero_point is not None:
                zero = onnx.TensorProto()
                zero.CopyFrom(spec.zero_point)
                zero.name = f"{tag}_zero_point"
                q_in.append(zero.name)
                m.graph.initializer.append(zero)
            q_attrs: dict[str, Any] = {k: v for k, v in spec.q_attrs if _ATTR_OPSET[k] <= target}
            dq_attrs: dict[str, Any] = {k: v for k, v in spec.dq_attrs if _ATTR_OPSET[k] <= target}
            m.graph.node.append(
                onnx.helper.make_node(
                    "QuantizeLinear", q_in, [f"{tag}_q"], name=f"{tag}_QuantizeLinear", **q_attrs
                )
            )
            m.graph.node.append(
                onnx.helper.make_node(
                    "DequantizeLinear",
                    [f"{tag}_q", *q_in[1:]],
                    [f"{tag}_dq"],
                    name=f"{tag}_DequantizeLinear",
                    **dq_attrs,
                )
            )
            pairs[key] = f"{tag}_dq"
        out[(name, idx)] = pairs[key]
    return out


def _qdq_fits(plan: QdqPlan, target: int) -> bool:
    """int8 Q/DQ with per-axis scales exist from opset 13; fp8 zero points need 19."""
    import onnx

    if target < 13:
        return False
    return not any(
        s.zero_point is not None
        and s.zero_point.data_type not in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
        for s in plan.edges.values()
    )


def quantized_tensors(model: ModelProto) -> list[dict[str, Any]]:
    """Each Q/DQ pair of a materialized graph: the tensor it quantizes, who reads the
    quantized value and who reads the tensor itself (the report's precision view)."""
    producer = onnx_model.producers(model)
    readers = onnx_model.readers(model)
    # a tied head's Transpose of its table is a weight (qdq/streamed.py scales it as one)
    weights = {i.name for i in model.graph.initializer} | set(tied_weights.transposed_from(model))
    out = []
    for n in model.graph.node:
        if n.op_type != "DequantizeLinear":
            continue
        q = producer.get(n.input[0])
        tensor = q.input[0] if q is not None and q.op_type == "QuantizeLinear" else n.input[0]
        out.append(
            {
                "tensor": tensor,
                "weight": tensor in weights,
                "quantized_readers": [r.name for r in readers[n.output[0]]],
                "unquantized_readers": [
                    r.name for r in readers[tensor] if r.op_type != "QuantizeLinear"
                ],
            }
        )
    return out
