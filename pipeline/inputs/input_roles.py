"""What reads an input: integers that pick an `If` branch, bound a `Loop`, size a shape or
meet an `Equal` are settings of the model, not samples. Drawn at random they pick a branch
or a shape the model is never run with, so every figure made from them would be about
another model. Such inputs are refused when the tool would draw them, with the readers
named, and three ways out (a value to freeze, a range, real data)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.graph.onnx_model import TensorSpec

if TYPE_CHECKING:
    from pipeline.core.config import ModelConfig

# Ops a value passes through unchanged in kind (a cast, a reshape, arithmetic): what
# reads their output reads the input.
PASS_THROUGH = frozenset(
    {
        "Cast", "Identity", "Unsqueeze", "Squeeze", "Flatten", "Reshape", "Concat",
        "Add", "Sub", "Mul", "Div", "Min", "Max", "Neg", "Abs", "Gather",
    }
)  # fmt: skip
# (op, input positions) whose value steers the graph rather than flowing through it.
CONTROL: dict[str, tuple[int, ...] | None] = {
    "If": (0,),
    "Loop": (0, 1),
    "Equal": None,
    "Greater": None,
    "Less": None,
    "GreaterOrEqual": None,
    "LessOrEqual": None,
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Slice": (1, 2, 3, 4),
    "ConstantOfShape": (0,),
    "Range": (0, 1, 2),
    "Resize": (2, 3),
    "Upsample": (1,),
    "TopK": (1,),
    "OneHot": (1,),
    "Pad": (1,),
    "Split": (1,),
}
MAX_HOPS = 6


def control_readers(graph: Any, name: str) -> list[str]:
    """The nodes where `name` (through pass-through ops) steers the graph, as
    "Equal 'n' -> If 'm'"-style descriptions; empty when it only flows as data."""
    readers: dict[str, list[tuple[Any, int]]] = defaultdict(list)
    for node in graph.node:
        for i, tensor in enumerate(node.input):
            readers[tensor].append((node, i))
    found: list[str] = []
    frontier, seen = [(name, "")], {name}
    for _ in range(MAX_HOPS):
        nxt = []
        for tensor, path in frontier:
            for node, pos in readers.get(tensor, []):
                label = f"{path}{node.op_type} '{node.name or node.output[0]}'"
                where = CONTROL.get(node.op_type, ())
                if where is None or (where and pos in where):
                    found.append(label)
                elif node.op_type in PASS_THROUGH:
                    for out in node.output:
                        if out not in seen:
                            seen.add(out)
                            nxt.append((out, f"{label} -> "))
        frontier = nxt
    return found


def check_random_inputs(graph: Any, specs: list[TensorSpec], model_cfg: ModelConfig) -> None:
    """Refuse, in one line, integer inputs that steer the graph and would be drawn at
    random (no model.input_ranges entry for them)."""
    ranged = set(getattr(model_cfg, "input_ranges", None) or {})
    bad: list[str] = []
    for spec in specs:
        if np.dtype(spec.dtype).kind not in "iub" or spec.name in ranged:
            continue
        readers = control_readers(graph, spec.name)
        if readers:
            bad.append(
                f"'{spec.name}' ({spec.dtype}, rank {len(spec.dims)}) is read by {readers[0]}"
            )
    if bad:
        names = [b.split("'")[1] for b in bad]
        raise PipelineError(
            f"random inputs would steer the model: {'; '.join(bad)}; a random value picks a "
            f"branch or a shape the model may never run with. Freeze it "
            f"(-S model.constant_inputs.{names[0]}=<value>), bound it "
            f"(-S 'model.input_ranges.{names[0]}=[low, high]') or give real inputs "
            f"(model.reference_data)"
        )
