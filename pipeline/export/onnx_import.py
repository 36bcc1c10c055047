"""A user's ONNX file brought into the export stage: checked by path, normalised for what
the precision transforms need, written beside its external data without re-serialising
the weights (a protobuf message cannot exceed 2 GB; models past it come in hundreds of
external-data files).

Normalising, done once here rather than in each transform:
- initializers out of the graph inputs (IR < 4 lists every weight as an input too, and
  AutoCast refuses such a graph: "initializer but not in graph input");
- opset below 13 upgraded with ONNX's version converter (per-channel Q/DQ need 13);
- every node named, uniquely (the fallback search and the report name nodes).
The user's own file stays the fp32 reference: its outputs are what every transformed
graph is judged against."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from pipeline.core.errors import PipelineError, first_line
from pipeline.export import onnx_model

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


def normalize(model: Any) -> list[str]:
    """Normalise `model` in place (graph only: weights are not touched); what changed."""
    import onnx

    changes = []
    before = onnx_model.opset(model)
    if before < MIN_OPSET:
        from onnx import version_converter

        try:
            converted = version_converter.convert_version(model, MIN_OPSET)
        except Exception as e:
            raise PipelineError(
                f"the model's opset {before} is below {MIN_OPSET}, which int8/fp8 Q/DQ and "
                f"AutoCast need, and ONNX's version converter cannot upgrade it: {first_line(e)}"
            ) from None
        model.CopyFrom(converted)
        changes.append(f"opset {before} upgraded to {MIN_OPSET} (ONNX version converter)")
    # after converting: the converter reads an IR < 4 graph's weights through its inputs
    inits = {i.name for i in model.graph.initializer}
    weights_as_inputs = [i for i in model.graph.input if i.name in inits]
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
    seen: set[str] = set()
    renamed = 0
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{i}" if not node.name else f"{node.name}_{i}"
            renamed += 1
        seen.add(node.name)
    if renamed:
        changes.append(f"{renamed} nodes named")
    return changes


# Domains whose opset versions ONNX's IR version table knows; any other (a custom op's
# domain, com.microsoft) asks for no particular IR version.
ONNX_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training")


def _min_ir_version(onnx: Any, model: Any) -> int:
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
    import onnx

    check(src)
    try:
        model = onnx.load(str(src), load_external_data=False)
    except Exception as e:
        raise PipelineError(f"ONNX model {src} is unreadable: {first_line(e)}") from None
    changes = normalize(model)
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
    # inline weights past 1 GiB go to one data file beside it (emptied in memory as written)
    onnx_model.save(model, dest)
    return changes


def copy_graph(src: Path, dest: Path) -> None:
    """A graph file and the external-data files it names, copied as files: a stage that
    passes a graph on unchanged never parses or re-serialises its weights."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
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
