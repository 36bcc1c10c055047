"""The way out, said after TensorRT's own line when a build fails: what the error means
for this graph and this config (control flow, If branches of unequal rank, weight
stripping without a driver)."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.core.config import BuildConfig


# Words of TensorRT's own faults (an assertion, an internal error) rather than the user's.
INTERNAL = ("Assertion", "Internal Error", "internal error", "Error Code 2:", "Error Code 10:")


def control_flow_hint(onnx_path: Path, errors: list[str]) -> str:
    """After an internal error in a graph with If/Loop/Scan nodes: name them and the way out.
    TensorRT optimizes their subgraphs as scopes, where its internal errors cluster."""
    if not any(word in e for e in errors for word in INTERNAL):
        return ""
    from pipeline.graph import onnx_model

    model = onnx_model.load(onnx_path, check=False, weights=False)
    nodes = [
        f"{n.op_type} '{n.name}'" for n in model.graph.node if n.op_type in ("If", "Loop", "Scan")
    ]
    if not nodes:
        return ""
    more = f" (+{len(nodes) - 3} more)" if len(nodes) > 3 else ""
    return (
        f"; the graph has control flow ({', '.join(nodes[:3])}{more}), whose subgraphs TensorRT "
        f"optimizes as scopes: freeze the inputs the conditions read (model.constant_inputs) so "
        f"the export folds the branches away, or try a newer TensorRT"
    )


# TensorRT cannot give a tensor of one rank or another at run time: an If whose branches
# differ in rank (a "squeeze where the batch is 1") needs its condition fixed at build time.
UNEQUAL_RANKS = "Must have inputs with equal ranks when condition is not a build-time constant"


def ranks_hint(errors: list[str]) -> str:
    """After an If refused for branches of unequal ranks: the dynamic dims its branches'
    shapes name (a dim's name, or `(# axis (SHAPE input))` where it has none), and the
    way out."""
    said = next((e for e in errors if UNEQUAL_RANKS in e), None)
    if said is None:
        return ""
    shapes = re.search(r"Dimensions are \[(.*?)\] and \[(.*?)\]\.", said)
    dims: list[str] = []
    for token in re.split(r",(?![^(]*\))", ",".join(shapes.groups()) if shapes else ""):
        token = token.strip()
        axis = re.fullmatch(r"\(# (\d+) \(SHAPE ([^)\s]+)\)\)", token)
        named = f"axis {axis[1]} of input '{axis[2]}'" if axis else f"dim '{token}'"
        if token and not token.isdigit() and named not in dims:
            dims.append(named)
    return (
        f"; an If node's branches give tensors of different ranks, chosen by "
        f"{', '.join(dims) or 'a dynamic dim'}: give it one size in the profile (min = opt = "
        f"max) so TensorRT folds the condition, or freeze the input that decides it "
        f"(model.constant_inputs)"
    )


def strip_hint(trt: ModuleType, build_cfg: BuildConfig, errors: list[str]) -> str:
    """TensorRT-RTX 1.7 compiles refittable weights with CUDA even ahead of time: on a
    machine without an NVIDIA driver a weight-stripped build fails in Myelin's JIT."""
    if not getattr(build_cfg, "strip_weights", False) or not any(
        "CUDA_SUCCESS" in e for e in errors
    ):
        return ""
    return (
        f" (build.strip_weights: {trt.__name__} {trt.__version__} needs a CUDA driver and GPU "
        "to build a weight-stripped engine; build it on a GPU host or set build.strip_weights=false)"
    )
