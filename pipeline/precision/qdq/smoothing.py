"""SmoothQuant on the ONNX graph (Xiao et al. 2023), before ModelOpt quantizes it: the
outlier channels of an activation move into the weights that read it, which are
quantized per output channel and do not mind.

For an activation X read by MatMuls with weights W_k ([in, out]), per input channel j:
s_j = max|X_j|^alpha / max_k max|W_k[j, :]|^(1 - alpha), X' = X / s, W_k' = diag(s) W_k,
so X' W_k' = X W_k. Where X is a LayerNormalization's output read only by these MatMuls
(pre-LN models), 1/s folds into its gamma and beta. Everywhere else (a post-LN model's
LayerNorm, as BERT's, whose output the residual Add reads too; a GELU output before the
FFN's output projection) the others keep reading X and the MatMuls read X * (1/s)
through one per-channel Mul, which TensorRT fuses into the quantization of the MatMuls'
input (a pointwise op before a QuantizeLinear).

`apply` smooths only the groups it is given: a group whose MatMuls are all kept in fp32
is left as the source has it, so the graph with every node kept is the fp32 graph."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from pipeline.core import hashing
from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model
from pipeline.graph.external_data import read_apart
from pipeline.precision.common.ops import MATMULS, drop_unread, reorder

if TYPE_CHECKING:
    from onnx import ModelProto

MODES = ("none", "smoothquant", "auto")


@dataclass(frozen=True)
class SmoothGroup:
    tensor: str  # the activation X
    producer: str  # the node making X (a LayerNorm where 1/s folds into it)
    matmuls: tuple[str, ...]
    weights: tuple[str, ...]  # each MatMul's weight initializer, in order
    fold: bool  # 1/s into gamma and beta (else a Mul on the MatMuls' branch)
    scale: tuple[float, ...]  # s, per input channel


def find_groups(model: ModelProto) -> list[tuple[str, str, list[tuple[str, str]], bool]]:
    """(X, X's producer, [(MatMul, weight)], foldable) for every activation read by
    MatMuls (or untransposed Gemms) with 2-D constant weights as their second input. Foldable: X is the output
    of a LayerNormalization with constant gamma and beta, and only these MatMuls read it."""
    inits = {i.name: i for i in model.graph.initializer}
    producer = onnx_model.producers(model)
    readers = onnx_model.readers(model)
    graph_outputs = {o.name for o in model.graph.output}
    out = []
    for x, nodes in readers.items():
        if x in inits or not x or _gemm_output(x, producer):
            continue
        mms = [(r.name, r.input[1]) for r in nodes if _reads_like_matmul(r, x, inits)]
        if not mms:
            continue
        prod = producer.get(x)
        layer_norm = (
            prod is not None
            and prod.op_type == "LayerNormalization"
            and len(prod.input) >= 3
            and prod.input[1] in inits
            and prod.input[2] in inits
        )
        fold = layer_norm and len(mms) == len(nodes) and x not in graph_outputs
        out.append((x, prod.name if prod is not None else "", mms, bool(fold)))
    return out


def _reads_like_matmul(node: Any, x: str, inits: dict[str, Any]) -> bool:
    """Whether `node` computes X W with a 2-D constant W [in, out]: a MatMul, or a Gemm
    that transposes neither (GPT-2's Conv1D exports so; its bias is added after the
    product, which the smoothing leaves equal)."""
    if len(node.input) < 2 or node.input[0] != x or node.input[1] not in inits:
        return False
    if len(inits[node.input[1]].dims) != 2:
        return False
    if node.op_type == "MatMul":
        return True
    flags = {a.name: a.i for a in node.attribute if a.name in ("transA", "transB")}
    return node.op_type == "Gemm" and not any(flags.values())


# Ops that only move data: a GEMM's output reshaped is still that GEMM's output.
_MOVES = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity")


def _gemm_output(x: str, producer: dict[str, Any]) -> bool:
    """Whether x is a GEMM's output, reshaped at most. A per-channel Mul there sits between
    two GEMMs: TensorRT then cannot fuse the pair (a fused attention kernel takes a
    per-tensor scale only; measured: smoothing the attention output projection's input
    split every fused MHA kernel into five), so such activations are not smoothed."""
    node = producer.get(x)
    while node is not None and node.op_type in _MOVES:
        node = producer.get(node.input[0])
    return node is not None and node.op_type in MATMULS


def activation_max(
    model: ModelProto,
    base_dir: Path | None,
    tensors: list[str],
    batches: list[dict[str, np.ndarray]],
) -> dict[str, np.ndarray]:
    """max|X_j| per channel (the last axis) of each tensor over the calibration batches,
    from one fp32 run of the graph with those tensors as extra outputs."""
    from pipeline.graph import onnx_runtime

    session = onnx_runtime.session_with_outputs(model, base_dir, tensors)
    out: dict[str, np.ndarray] = {}
    for feeds in batches:
        for t, x in zip(tensors, onnx_runtime.run_named(session, tensors, feeds, "to smooth")):
            a = np.abs(x).reshape(-1, x.shape[-1]).max(axis=0)
            out[t] = a if t not in out else np.maximum(out[t], a)
    return out


def compute(
    model: ModelProto,
    alpha: float,
    activation_max: Callable[[list[str]], dict[str, np.ndarray]],
    base: Path | None = None,
) -> list[SmoothGroup]:
    """Smoothing scales for each group; activation_max(tensors) gives max|X_j| per
    channel of each named tensor over the calibration data. Weights are read one at a
    time (from `base`'s files where the model keeps them there)."""
    if not 0.0 <= alpha <= 1.0:
        raise PipelineError(f"precision.smoothing_alpha={alpha} is outside [0, 1]")
    found = find_groups(model)
    if not found:
        return []
    inits = {i.name: i for i in model.graph.initializer}
    x_max = activation_max([x for x, *_ in found])
    groups = []
    for x, ln, mms, fold in found:
        w_max = np.max([np.abs(read_apart(inits[w], base)).max(axis=1) for _, w in mms], axis=0)
        a = np.asarray(x_max[x], dtype=np.float64)
        if a.shape != w_max.shape:
            continue  # a MatMul reading X along another axis: not a channel-wise product
        s = np.where(
            (a > 0) & (w_max > 0), a**alpha / np.maximum(w_max, 1e-12) ** (1.0 - alpha), 1.0
        )
        s = np.clip(s, 1e-4, 1e4)
        groups.append(
            SmoothGroup(
                x,
                ln,
                tuple(m for m, _ in mms),
                tuple(w for _, w in mms),
                fold,
                tuple(float(v) for v in s),
            )
        )
    return groups


def smoothed_tensors(
    model: ModelProto, groups: list[SmoothGroup], base: Path | None = None
) -> Iterator[Any]:
    """Each tensor the groups' smoothing makes, one at a time, named `<source>_smoothed`:
    a folded LayerNorm's gamma / s and beta / s, each MatMul's diag(s) W. Weights are read
    from `base`'s files where the model keeps them there. A tensor two groups read is
    made once, by the first (apply rewires both to it)."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    nodes = {n.name: n for n in model.graph.node}
    made: set[str] = set()
    for g in groups:
        s = np.asarray(g.scale, dtype=np.float32)
        norm = [nodes[g.producer].input[i] for i in (1, 2)] if g.fold else []
        for name, weight in [*((t, False) for t in norm), *((w, True) for w in g.weights)]:
            out = smoothed_name(name)
            if out in made:
                continue
            made.add(out)
            src = read_apart(inits[name], base).astype(np.float32)
            yield numpy_helper.from_array(src * s[:, None] if weight else src / s, out)


def smoothed_name(tensor: str) -> str:
    return f"{tensor}_smoothed"


def apply(
    model: ModelProto,
    groups: list[SmoothGroup],
    keep: set[str] | None = None,
    made: dict[str, Any] | None = None,
    sources_kept: bool = False,
) -> Any:
    """A copy of `model` with these groups smoothed. A kept MatMul of a Mul-branch group
    reads X and its source weight, exactly as the fp32 graph has them. `made`: the
    tensors smoothed_tensors() gave, by name (made here when not given); a source tensor
    no node reads any more is left out of the copy, unless `sources_kept` (for a graph
    whose nodes will be wired to them again)."""
    import onnx
    from onnx import numpy_helper

    if made is None:
        made = {t.name: t for t in smoothed_tensors(model, groups)}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = {n.name: n for n in m.graph.node}
    added: dict[str, Any] = {}
    replaced: set[str] = set()

    def smoothed(tensor: str) -> str:
        replaced.add(tensor)
        added[smoothed_name(tensor)] = made[smoothed_name(tensor)]
        return smoothed_name(tensor)

    for g in groups:
        tag = g.tensor.replace("/", "_").strip("_")
        if g.fold:
            ln = nodes[g.producer]
            for idx in (1, 2):
                ln.input[idx] = smoothed(ln.input[idx])
            reads = g.tensor
        else:
            inv = f"{tag}_smooth_inv_scale"
            reads = f"{tag}_smoothed"
            inverse = (1.0 / np.asarray(g.scale, dtype=np.float32)).astype(np.float32)
            added[inv] = numpy_helper.from_array(inverse, inv)
            m.graph.node.append(
                onnx.helper.make_node("Mul", [g.tensor, inv], [reads], name=f"{tag}_smooth_Mul")
            )
        for mm, w in zip(g.matmuls, g.weights):
            if not g.fold and mm in (keep or ()):
                continue
            nodes[mm].input[0], nodes[mm].input[1] = reads, smoothed(w)
    for t in added.values():
        m.graph.initializer.add().CopyFrom(t)
    if not sources_kept:
        drop_unread(m, replaced)  # a source weight a smoothed one replaced
    if any(not g.fold for g in groups):
        reorder(m)
    return m


class SmoothingKey(TypedDict):
    """What the calibration cache is keyed by of the smoothing (qdq/quantize.key_inputs)."""

    mode: str  # precision.smoothing
    alpha: float
    groups_sha256: str


class SmoothedGroup(TypedDict):
    """One SmoothGroup as calibration.json and the report show it."""

    tensor: str
    producer: str
    matmuls: list[str]
    folded_into_layer_norm: bool
    scale_max: float
    scale_min: float


class SmoothingRecord(SmoothingKey):
    """calibration.json's calibration.smoothing."""

    groups: list[SmoothedGroup]
    note: NotRequired[str]  # where no group was found and the graph is unchanged


def record(groups: list[SmoothGroup], alpha: float, mode: str) -> SmoothingRecord:
    """What calibration.json and the report say about smoothing."""
    return {
        "mode": mode,
        "alpha": alpha,
        # what the smoothed graph is: the calibration cache is keyed by it (the groups
        # found depend on this code, not only on the graph, the data and alpha)
        "groups_sha256": hashing.sha256_json(
            [[g.tensor, list(g.matmuls), g.fold, list(g.scale)] for g in groups]
        ),
        "groups": [
            {
                "tensor": g.tensor,
                "producer": g.producer,
                "matmuls": list(g.matmuls),
                "folded_into_layer_norm": g.fold,
                "scale_max": round(max(g.scale), 4),
                "scale_min": round(min(g.scale), 4),
            }
            for g in groups
        ],
    }
