"""How many parameters a graph holds and how many of them are GEMM weights: what an
engine's bytes per parameter are held against (core/engine_sizes.py's ideal). A tied
weight counts once (graph/tied_weights.py has stored it once)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.core.engine_sizes import WeightCounts
from pipeline.graph.tied_weights import FLOAT_TYPES, transposed_from

if TYPE_CHECKING:
    from onnx import ModelProto

# The input that holds a GEMM's weight: MatMul and Gemm read B, a convolution its filter.
WEIGHT_INPUT = {"MatMul": 1, "Gemm": 1, "Conv": 1, "ConvTranspose": 1}


def counts(model: ModelProto) -> WeightCounts:
    """The float parameters of `model`, and those read as GEMM weights (directly, or through
    a tied head's Transpose)."""
    import math

    sizes = {
        i.name: math.prod(i.dims) for i in model.graph.initializer if i.data_type in FLOAT_TYPES
    }
    tied_from = transposed_from(model)
    gemm: set[str] = set()
    for node in model.graph.node:
        index = WEIGHT_INPUT.get(node.op_type)
        if index is not None and len(node.input) > index:
            name = tied_from.get(node.input[index], node.input[index])
            if name in sizes:
                gemm.add(name)
    return {"parameters": sum(sizes.values()), "gemm": sum(sizes[n] for n in gemm)}
