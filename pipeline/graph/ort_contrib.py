"""ONNX Runtime's contrib ops written in standard ONNX, so TensorRT parses the graph: ONNX
Runtime GenAI's model builder writes decoders with them (its CPU and CUDA targets), and
ONNX Runtime's transformer optimizer writes the norms and GELUs.

Written out here, each node replaced in place by the standard nodes that compute it:

    GroupQueryAttention (com.microsoft)          graph/ort_attention.py
    SimplifiedLayerNormalization                 RMS norm (ONNX Runtime registers it in
                                                 ONNX's own domain; ONNX has no such op)
    SkipSimplifiedLayerNormalization             the residual sum, then the RMS norm
    SkipLayerNormalization                       the residual sum, then LayerNormalization
    Gelu, FastGelu, BiasGelu, QuickGelu          their formulas

The norms are written as the builder writes them for TensorRT-RTX itself (`-e
NvTensorRtRtx`): the sum of squares in fp32 (stash_type 1), cast back before the scale.
Any other com.microsoft op is refused in one line: TensorRT has no importer for it. The
user's file keeps its contrib ops and stays the fp32 reference: the rewritten graph is
judged against ONNX Runtime's own kernels."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model, ort_attention
from pipeline.graph.node_emitter import FLOAT, Emitter, attributes, float_type, onnx_type

if TYPE_CHECKING:
    from onnx import GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto

MS = "com.microsoft"
ONNX_DOMAIN = ("", "ai.onnx")
Inits = dict[str, "TensorProto"]


@dataclass
class Graph:
    """The model being rewritten, with the maps its rewrites read, made once for all of
    them (a decoder has a GroupQueryAttention per layer)."""

    model: ModelProto
    inits: Inits

    @cached_property
    def producers(self) -> dict[str, NodeProto]:
        return onnx_model.producers(self.model)

    @cached_property
    def inputs(self) -> dict[str, ValueInfoProto]:
        return {i.name: i for i in self.model.graph.input}


def contrib_nodes(model: ModelProto) -> list[NodeProto]:
    """The top-level nodes that are ONNX Runtime's, not ONNX's."""
    return [n for n in model.graph.node if _is_contrib(n)]


def _is_contrib(node: NodeProto) -> bool:
    return _key(node) in LOWERINGS or node.domain == MS


def _nested_contrib_ops(graph: GraphProto) -> set[str]:
    """Contrib ops inside the subgraphs of `graph`'s nodes (an If's branches, a Loop's body)."""
    ops: set[str] = set()
    for node in graph.node:
        for _, sub in onnx_model.subgraphs(node):
            ops |= {n.op_type for n in sub.node if _is_contrib(n)}
            ops |= _nested_contrib_ops(sub)
    return ops


def lower(model: ModelProto, src: str) -> str:
    """Rewrite `model`'s contrib ops in place; what changed (empty: none there)."""
    nested = _nested_contrib_ops(model.graph)
    if nested:  # a branch's nodes are not rewritten here: said, not left to TensorRT's parser
        raise PipelineError(
            f"ONNX model {src} has ONNX Runtime contrib ops inside an If or Loop subgraph "
            f"({', '.join(sorted(nested))}), which this tool rewrites only at the top level"
        )
    found = contrib_nodes(model)
    if not found:
        return ""
    _refuse_unknown(found, src)
    graph = Graph(model, {t.name: t for t in model.graph.initializer})
    rewritten: list[NodeProto] = []
    for node in model.graph.node:
        lowering = LOWERINGS.get(_key(node))
        if lowering is None:
            rewritten.append(node)
            continue
        try:
            e = lowering(node, graph)
        except PipelineError as err:
            raise PipelineError(f"ONNX model {src}: {err}") from None
        rewritten.extend(e.nodes)
        model.graph.initializer.extend(e.constants)
    del model.graph.node[:]
    model.graph.node.extend(rewritten)
    if not any(n.domain == MS for n in model.graph.node):
        kept = [o for o in model.opset_import if o.domain != MS]
        del model.opset_import[:]
        model.opset_import.extend(kept)
    counts = Counter(n.op_type for n in found)
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(counts.items()))
    return f"{len(found)} ONNX Runtime contrib ops written in standard ONNX for TensorRT ({ops})"


def _key(node: NodeProto) -> tuple[str, str]:
    return ("" if node.domain in ONNX_DOMAIN else node.domain, node.op_type)


def _refuse_unknown(found: list[NodeProto], src: str) -> None:
    unknown = sorted({n.op_type for n in found if _key(n) not in LOWERINGS})
    if not unknown:
        return
    hint = ""
    if "MatMulNBits" in unknown:
        hint = (
            "; MatMulNBits holds int4 weights in ONNX Runtime's own layout (a GenAI int4 "
            "export): give the fp32 or fp16 export and precision=int4_awq or int4_rtn"
        )
    raise PipelineError(
        f"ONNX model {src} uses ONNX Runtime contrib ops TensorRT cannot parse and this tool "
        f"does not rewrite: {', '.join(unknown)}{hint}"
    )


def _rms_norm(
    e: Emitter, x: str, scale: str, eps: float, dtype: np.dtype, outs: tuple[str, str]
) -> None:
    """x / sqrt(mean(x^2) + eps) * scale, the statistics in fp32; outs: (y, inv_std_var)."""
    wide = x if dtype == np.float32 else e.op("Cast", x, to=FLOAT)
    mean = e.op(
        "ReduceMean", e.op("Pow", wide, e.const(2.0, np.float32)), e.const([-1]), keepdims=1
    )
    root = e.op("Sqrt", e.op("Add", mean, e.const(eps, np.float32)))
    inv = e.op("Div", e.const(1.0, np.float32), root, out=outs[1])
    normed = e.op("Mul", inv, wide)
    if dtype != np.float32:
        normed = e.op("Cast", normed, to=onnx_type(dtype))
    e.op("Mul", normed, scale, out=outs[0])


def _outputs(node: NodeProto, n: int) -> list[str]:
    return [*node.output, *[""] * (n - len(node.output))]


def _one_axis(node: NodeProto, attrs: dict[str, Any]) -> None:
    if int(attrs.get("axis", -1)) != -1:
        raise PipelineError(f"{node.op_type} {node.name} normalises more than the last axis")


def simplified_layer_norm(node: NodeProto, graph: Graph) -> Emitter:
    attrs = attributes(node)
    _one_axis(node, attrs)
    e = Emitter(node.name or node.output[0])
    y, inv = _outputs(node, 2)[:2]
    eps = float(attrs.get("epsilon", 1e-5))
    _rms_norm(
        e, node.input[0], node.input[1], eps, float_type(graph.inits.get(node.input[1])), (y, inv)
    )
    return e


def _residual_sum(e: Emitter, node: NodeProto, bias_slot: int) -> str:
    """input + skip (+ bias), named as the op's 4th output where the graph reads it."""
    total = _outputs(node, 4)[3]
    ins = [*node.input, *[""] * (5 - len(node.input))]
    if ins[bias_slot]:
        summed = e.op("Add", ins[0], ins[1])
        return e.op("Add", summed, ins[bias_slot], out=total)
    return e.op("Add", ins[0], ins[1], out=total)


def skip_simplified_layer_norm(node: NodeProto, graph: Graph) -> Emitter:
    y, mean, inv, _sum = _outputs(node, 4)
    if mean:
        raise PipelineError(f"{node.op_type} {node.name}: its mean output has no RMS meaning")
    e = Emitter(node.name or node.output[0])
    summed = _residual_sum(e, node, bias_slot=3)
    eps = float(attributes(node).get("epsilon", 1e-5))
    _rms_norm(e, summed, node.input[2], eps, float_type(graph.inits.get(node.input[2])), (y, inv))
    return e


def skip_layer_norm(node: NodeProto, graph: Graph) -> Emitter:
    y, mean, inv, _sum = _outputs(node, 4)
    if mean or inv:
        raise PipelineError(f"{node.op_type} {node.name}: its statistics outputs are read")
    opset = onnx_model.opset(graph.model)
    if opset < 17:
        raise PipelineError(
            f"{node.op_type} {node.name}: LayerNormalization needs opset 17, the model has {opset}"
        )
    e = Emitter(node.name or node.output[0])
    summed = _residual_sum(e, node, bias_slot=4)
    ins = [*node.input, ""] if len(node.input) < 4 else list(node.input)
    eps = float(attributes(node).get("epsilon", 1e-12))
    norm_ins = [summed, ins[2], *([ins[3]] if ins[3] else [])]
    e.multi("LayerNormalization", norm_ins, [y], axis=-1, epsilon=eps)
    return e


def gelu(node: NodeProto, _: Graph) -> Emitter:
    """Gelu and BiasGelu: x/2 (1 + erf(x / sqrt 2)); FastGelu: its tanh form."""
    e = Emitter(node.name or node.output[0])
    x = node.input[0]
    if len(node.input) > 1 and node.input[1]:
        x = e.op("Add", x, node.input[1])
    half = e.op("Mul", x, _like(e, 0.5, x))
    if node.op_type == "FastGelu":
        cube = e.op("Mul", e.op("Mul", x, x), x)
        inner = e.op("Add", x, e.op("Mul", cube, _like(e, 0.044715, x)))
        curve = e.op("Tanh", e.op("Mul", inner, _like(e, np.sqrt(2 / np.pi), x)))
    else:
        curve = e.op("Erf", e.op("Div", x, _like(e, np.sqrt(2.0), x)))
    e.op("Mul", half, e.op("Add", curve, _like(e, 1.0, x)), out=node.output[0])
    return e


def quick_gelu(node: NodeProto, _: Graph) -> Emitter:
    """x * sigmoid(alpha x)."""
    e = Emitter(node.name or node.output[0])
    x = node.input[0]
    alpha = float(attributes(node).get("alpha", 1.702))
    e.op("Mul", x, e.op("Sigmoid", e.op("Mul", x, _like(e, alpha, x))), out=node.output[0])
    return e


def _like(e: Emitter, value: float, x: str) -> str:
    """A constant in x's float type (a GELU's type is not written beside it)."""
    return e.op("CastLike", e.const(value, np.float32), x)


def group_query_attention(node: NodeProto, graph: Graph) -> Emitter:
    size = _head_size(node, graph)
    if size:
        _cache_dims_fixed(node, graph.model, size)
    return ort_attention.lower(node, graph.inits, size)


def _cache_dims_fixed(node: NodeProto, model: ModelProto, head_size: int) -> None:
    """The cache's heads and head size written as numbers where the graph's inputs and
    outputs name them (GenAI's builder calls the head size `kv_cache_dim`): a profile
    needs them fixed, and the attention fixes them anyway."""
    kv = ort_attention.heads_of(node).kv
    cache = {*node.input[3:5], *node.output[1:3]} - {""}
    for vi in [*model.graph.input, *model.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if vi.name not in cache or len(dims) != 4:
            continue
        for axis, size in ((1, kv), (3, head_size)):
            if not dims[axis].HasField("dim_value"):
                dims[axis].dim_value = size


def _head_size(node: NodeProto, graph: Graph) -> int | None:
    """The head size where the graph says it: the past cache's last dim, else the width of
    the projection that makes the query (a MatMul of a weight, possibly plus a bias)."""
    heads = ort_attention.heads_of(node)
    past = graph.inputs.get(node.input[3] if len(node.input) > 3 else "")
    if past is not None:
        dims = past.type.tensor_type.shape.dim
        if len(dims) == 4 and dims[3].HasField("dim_value"):
            return int(dims[3].dim_value)
    width = _projection_width(node.input[0], graph.producers, graph.inits)
    packed = len(node.input) < 2 or not node.input[1]
    per_token = heads.query + 2 * heads.kv if packed else heads.query
    return width // per_token if width and width % per_token == 0 else None


def _projection_width(tensor: str, producers: dict[str, NodeProto], inits: Inits) -> int | None:
    node = producers.get(tensor)
    if node is not None and node.op_type == "Add":
        node = next((producers[i] for i in node.input if i in producers), None)
    if node is None or node.op_type != "MatMul" or node.input[1] not in inits:
        return None
    return int(inits[node.input[1]].dims[-1])


Lowering = Callable[["NodeProto", Graph], Emitter]
LOWERINGS: dict[tuple[str, str], Lowering] = {
    (MS, ort_attention.GQA): group_query_attention,
    ("", "SimplifiedLayerNormalization"): simplified_layer_norm,
    (MS, "SimplifiedLayerNormalization"): simplified_layer_norm,
    (MS, "SkipSimplifiedLayerNormalization"): skip_simplified_layer_norm,
    (MS, "SkipLayerNormalization"): skip_layer_norm,
    (MS, "Gelu"): gelu,
    (MS, "BiasGelu"): gelu,
    (MS, "FastGelu"): gelu,
    (MS, "QuickGelu"): quick_gelu,
}
