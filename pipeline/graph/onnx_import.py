"""A user's ONNX file brought into the export stage: checked by path, normalised for what
the precision transforms need, written beside its external data without re-serialising
the weights (a protobuf message cannot exceed 2 GB; models past it come in hundreds of
external-data files).

Normalising, done once here rather than in each transform:
- initializers out of the graph inputs (IR < 4 lists every weight as an input too, and
  AutoCast refuses such a graph: "initializer but not in graph input");
- opset below 13 upgraded with ONNX's version converter (per-channel Q/DQ need 13);
- input and output dims named `?` or `unk` named per axis (see anonymous_dims_named);
- `Constant` nodes holding weights made initializers (paddle2onnx writes weights so);
- every node named, uniquely (the fallback search and the report name nodes);
- intermediate shape annotations dropped (ONNX Runtime's memory planner trusts them, and
  exporters write different sizes under one name: jax2tf's `unk`).
ONNX Runtime's contrib ops (GenAI's GroupQueryAttention, the fused norms) are written in
standard ONNX first (graph/ort_contrib.py); a graph ONNX Runtime quantized (integer
kernels TensorRT does not build) is refused here, pointing at its fp32 original.
The user's own file stays the fp32 reference: its outputs are what every transformed
graph is judged against."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PipelineError, first_line
from pipeline.graph import onnx_model, ort_contrib

if TYPE_CHECKING:
    from onnx import ModelProto

MIN_OPSET = 13


def check(src: Path) -> None:
    """onnx's checker on the path: it reads external data beside the file and never builds
    one protobuf message of the whole model."""
    import onnx

    if not src.is_file():
        raise PipelineError(f"ONNX model not found: {src}")
    try:
        onnx.checker.check_model(str(src), full_check=True)
    except Exception as e:
        raise PipelineError(f"ONNX model {src} fails the ONNX checker: {first_line(e)}") from None


# Ops ONNX Runtime's quantization tools write (dynamic and static QOperator formats).
ORT_QUANTIZED_OPS = frozenset(
    {
        "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QLinearConv",
        "QLinearMatMul", "DynamicQuantizeMatMul", "QAttention", "QLinearAdd", "QLinearMul",
    }
)  # fmt: skip


def refuse_ort_quantized(model: ModelProto, src: Path) -> None:
    ops = sorted({n.op_type for n in model.graph.node if n.op_type in ORT_QUANTIZED_OPS})
    if ops:
        raise PipelineError(
            f"ONNX model {src} was quantized by ONNX Runtime ({', '.join(ops[:3])}): TensorRT "
            f"builds no such integer kernels; give its fp32 original and precision=int8, which "
            f"quantizes it with Q/DQ nodes TensorRT runs"
        )


def normalize(model: ModelProto) -> list[str]:
    """Normalise `model` in place (graph only: weights are not touched); what changed, one
    line per step that changed something."""
    changes = [_upgraded_opset(model), *_weights_out_of_inputs(model)]
    renamed_dims = anonymous_dims_named(model)
    if renamed_dims:
        changes.append(
            f"{renamed_dims} input/output dims named `?` or `unk` given names of their own"
        )
    moved = constants_to_initializers(model)
    if moved:
        changes.append(f"{moved} Constant nodes made initializers")
    if model.graph.value_info:
        changes.append(f"{len(model.graph.value_info)} intermediate shape annotations dropped")
        onnx_model.drop_intermediate_shapes(model)
    renamed = _nodes_named(model)
    if renamed:
        changes.append(f"{renamed} nodes named")
    return [c for c in changes if c]


def _upgraded_opset(model: ModelProto) -> str:
    before = onnx_model.opset(model)
    if before >= MIN_OPSET:
        return ""
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:
        raise PipelineError(
            f"the model's opset {before} is below {MIN_OPSET}, which int8/fp8 Q/DQ and "
            f"AutoCast need, and ONNX's version converter cannot upgrade it: {first_line(e)}"
        ) from None
    model.CopyFrom(converted)
    return f"opset {before} upgraded to {MIN_OPSET} (ONNX version converter)"


def _weights_out_of_inputs(model: ModelProto) -> list[str]:
    """After converting: the converter reads an IR < 4 graph's weights through its inputs.
    Also raises the IR version to what the opsets need."""
    import onnx

    inits = {i.name for i in model.graph.initializer}
    weights_as_inputs = [i for i in model.graph.input if i.name in inits]
    changes = []
    if weights_as_inputs:
        for i in weights_as_inputs:
            model.graph.input.remove(i)
        changes.append(f"{len(weights_as_inputs)} initializers taken out of the graph inputs")
    need_ir = _min_ir_version(onnx, model)
    if weights_as_inputs or model.ir_version < need_ir:
        new_ir = max(need_ir, 4 if weights_as_inputs else 0, model.ir_version)
        if new_ir != model.ir_version:
            changes.append(f"IR version {model.ir_version} -> {new_ir}")
            model.ir_version = new_ir
    return changes


def _nodes_named(model: ModelProto) -> int:
    """Every node named, uniquely (the fallback search and the report name nodes)."""
    seen: set[str] = set()
    renamed = 0
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{i}" if not node.name else f"{node.name}_{i}"
            renamed += 1
        seen.add(node.name)
    return renamed


def anonymous_dims_named(model: ModelProto) -> int:
    """Graph input and output dims named `?`, `unk` (or `-1`) renamed `<tensor>:<axis>`:
    such a name means "some size", but ONNX Runtime and TensorRT take one name for one size
    (TensorRT refuses a profile where a classifier's H and W are both `?`)."""
    renamed = 0
    for vi in [*model.graph.input, *model.graph.output]:
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_param") and d.dim_param in onnx_model.ANONYMOUS_DIMS:
                d.dim_param = f"{vi.name}:{axis}"
                renamed += 1
    return renamed


def constants_to_initializers(model: ModelProto) -> int:
    """Top-level `Constant` nodes holding a tensor become initializers (paddle2onnx writes
    every weight so): per-channel weight quantization and the report find weights there.
    Inside subgraphs they stay (an If branch's constants belong to the branch)."""
    graph = model.graph
    moved = [
        n
        for n in graph.node
        if n.op_type == "Constant" and [a.name for a in n.attribute] == ["value"]
    ]
    for node in moved:
        tensor = node.attribute[0].t
        tensor.name = node.output[0]
        graph.initializer.append(tensor)
        graph.node.remove(node)
    return len(moved)


# Domains whose opset versions ONNX's IR version table knows; any other (a custom op's
# domain, com.microsoft) asks for no particular IR version.
ONNX_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training")


def _min_ir_version(onnx: Any, model: ModelProto) -> int:
    known = [o for o in model.opset_import if o.domain in ONNX_DOMAINS]
    try:
        return int(onnx.helper.find_min_ir_version_for(known)) if known else 3
    except ValueError:  # a version newer than this onnx knows
        versions = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in known)
        raise PipelineError(
            f"the model imports opsets ({versions}) that onnx {onnx.__version__} does not know; "
            "export it at an older opset or upgrade onnx"
        ) from None


def import_onnx(src: Path, dest: Path) -> list[str]:
    """Write dest (the graph, normalised) and copies of its external-data files beside it;
    what normalising changed."""
    model = onnx_model.load(src, check=False, weights=False)
    contrib = ort_contrib.lower(model, str(src))
    if not contrib:  # the checker knows no contrib op: the rewritten graph is checked below
        check(src)
    refuse_ort_quantized(model, src)
    changes = [c for c in (contrib, *normalize(model)) if c]
    for ext in onnx_model.external_data_files(model, src.parent):
        # a location is read from the user's file: it must name a file beside the model
        rel = Path(os.path.relpath(ext.resolve(), src.parent.resolve()))
        if rel.is_absolute() or rel.parts[:1] == ("..",) or not ext.is_file():
            raise PipelineError(
                f"ONNX model {src} names external data {ext} outside its own folder or missing"
            )
        target = dest.parent / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy(ext, target)
    # inline weights past the inline limit go to one data file beside it (emptied in memory
    # as written)
    onnx_model.save(model, dest)
    if contrib:
        _check_rewritten(dest, src)
    return changes


def _check_rewritten(dest: Path, src: Path) -> None:
    try:
        check(dest)
    except PipelineError as e:
        raise PipelineError(f"ONNX model {src}, its contrib ops rewritten: {e}") from None


def copy_graph(src: Path, dest: Path) -> None:
    """A graph file and the external-data files it names, copied as files: a stage that
    passes a graph on unchanged never parses or re-serialises its weights."""
    model = onnx_model.load(src, check=False, weights=False)
    for ext in onnx_model.external_data_files(model, src.parent):
        target = dest.parent / ext.relative_to(src.parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy(ext, target)
    _copy(src, dest)


def _copy(src: Path, dest: Path) -> None:
    # Not a hard link: onnx.load refuses external data with more than one link ("a
    # potential hardlink attack"). copyfile streams in the kernel (copy_file_range where
    # the filesystem has it), so the weights never pass through this process's memory.
    shutil.copyfile(src, dest)
