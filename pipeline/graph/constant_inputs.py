"""model.constant_inputs: inputs frozen to a value and folded into the graph at export.

A sample rate that selects an `If` branch, a flag, a fixed sequence length: freezing the
value and folding what depends on it (Polygraphy's constant folding, which flattens an `If`
whose condition became constant) leaves the graph a deployment runs, one TensorRT can build
where it cannot build the control flow. The frozen input is no longer fed; the export's
fp32 reference still comes from the model as given, fed the same value."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import PipelineError, first_line
from pipeline.graph import onnx_model
from pipeline.graph.onnx_model import TensorSpec

if TYPE_CHECKING:
    from onnx import ModelProto


def values(constants: Mapping[str, Any], specs: list[TensorSpec]) -> dict[str, np.ndarray]:
    """Each configured value as an array of its input's dtype and rank, checked against
    the input's fixed dims."""
    by_name = {s.name: s for s in specs}
    out = {}
    for name, value in constants.items():
        spec = by_name.get(name)
        if spec is None:
            raise PipelineError(
                f"invalid config: model.constant_inputs names '{name}', which is not an input "
                f"of the model (its inputs: {', '.join(by_name)})"
            )
        try:
            a = np.asarray(value, dtype=np.dtype(spec.dtype))
        except (TypeError, ValueError) as e:
            raise PipelineError(
                f"invalid config: model.constant_inputs.{name}={value!r} is not a "
                f"{spec.dtype} value: {first_line(e)}"
            ) from None
        if a.ndim < len(spec.dims) and a.size == 1:
            a = a.reshape((1,) * len(spec.dims))  # a scalar for a [1] or [1, 1] input
        fits = a.ndim == len(spec.dims) and all(
            not isinstance(d, int) or d == n for d, n in zip(spec.dims, a.shape)
        )
        if not fits:
            raise PipelineError(
                f"invalid config: model.constant_inputs.{name} has shape {list(a.shape)}, "
                f"the input is {list(spec.dims)}"
            )
        out[name] = a
    return out


def freeze(path: Path, frozen: dict[str, np.ndarray]) -> list[str]:
    """Rewrite the graph at `path` with `frozen` inputs as constants, folded; what changed,
    for export.json. Every graph output is still produced (state outputs included)."""
    import onnx

    model = onnx_model.load(path, check=False)
    graph = model.graph
    kept = [i for i in graph.input if i.name not in frozen]
    del graph.input[:]
    graph.input.extend(kept)
    for name, a in frozen.items():
        graph.initializer.append(onnx.numpy_helper.from_array(a, name))
    try:
        folded, inlined = _folded(model)
    except Exception as e:
        raise PipelineError(
            f"folding the graph with model.constant_inputs "
            f"({', '.join(frozen)}) failed: {first_line(e)}"
        ) from None
    lost = _unproduced_outputs(folded)
    if lost:  # a bug of the folding, not of the user's model: keep the traceback
        raise AssertionError(f"folding lost graph output(s) {lost}")
    onnx_model.save(folded, path)
    left = [n.op_type for n in folded.graph.node if n.op_type in ("If", "Loop")]
    note = f"; {len(left)} If/Loop node(s) remain" if left else "; no If/Loop node remains"
    return [
        f"froze input(s) {', '.join(f'{k}={v.tolist()}' for k, v in frozen.items())} and "
        f"folded constants, {inlined} If node(s) replaced by the branch they take{note}"
    ]


# Rounds of folding and inlining at most: a round may fold shapes the one before could not,
# or make constant the condition of an If nested in a branch it inlined.
MAX_ROUNDS = 16


def _folded(model: ModelProto) -> tuple[Any, int]:
    """`model` folded (Polygraphy's shape inference, ONNX's own: ONNX Runtime's writes
    temporary files into the working directory, ONNX-GraphSurgeon's constant folding),
    each If whose condition became constant replaced by its branch, until nothing changes;
    and how many Ifs were replaced. GraphSurgeon's own If flattening (what Polygraphy's
    fold_constants runs) loses an If output made inside a nested branch: Silero VAD's
    `stateN`, frozen at sr=16000, was left without a producer."""
    import onnx_graphsurgeon as gs
    from polygraphy.backend.onnx import infer_shapes

    inlined = 0
    for _ in range(MAX_ROUNDS):
        before = len(model.graph.node)
        graph = gs.import_onnx(infer_shapes(model, allow_onnxruntime=False))
        graph.fold_constants(flatten_subgraphs=False, error_ok=False).cleanup()
        model = gs.export_onnx(graph)
        done = _inline_constant_ifs(model)
        inlined += done
        # as Polygraphy's num_passes=None: again while a pass still folds something
        if not done and len(model.graph.node) == before:
            break
    return model, inlined


def _inline_constant_ifs(model: ModelProto) -> int:
    """Replace each top-level If whose condition is an initializer by the nodes of the branch
    it takes, its names given the If's name as a suffix (a branch may reuse an outer
    name: ONNX checks names per scope), its results passed on under the If's output names;
    the count replaced."""
    from onnx import GraphProto, helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    nodes: list[Any] = []
    count = 0
    for node in model.graph.node:
        if node.op_type != "If" or node.input[0] not in inits:
            nodes.append(node)
            continue
        taken = bool(numpy_helper.to_array(inits[node.input[0]]).reshape(-1)[0])
        which = "then_branch" if taken else "else_branch"
        branch = GraphProto()
        branch.CopyFrom(next(a.g for a in node.attribute if a.name == which))
        local = {o for n in branch.node for o in n.output if o}
        local |= {i.name for i in branch.initializer}
        _rename(branch, {x: f"{x}::{node.name or node.output[0]}" for x in local}, own=True)
        nodes += list(branch.node)
        model.graph.initializer.extend(branch.initializer)
        nodes += [
            helper.make_node("Identity", [b.name], [out], name=f"{out}::from_{which}")
            for b, out in zip(branch.output, node.output)
        ]
        count += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return count


def _rename(graph: Any, names: dict[str, str], own: bool) -> None:
    """Rename `names` in `graph`: what it defines where `own` (the inlined branch), what it
    reads everywhere, down nested subgraphs (where a name they define shadows ours)."""
    if not own:
        defined = {o for n in graph.node for o in n.output}
        defined |= {i.name for i in [*graph.initializer, *graph.input]}
        names = {k: v for k, v in names.items() if k not in defined}
    for n in graph.node:
        n.input[:] = [names.get(x, x) for x in n.input]
        if own:
            n.output[:] = [names.get(x, x) for x in n.output]
        for _, g in onnx_model.subgraphs(n):
            _rename(g, names, own=False)
    if own:
        for i in graph.initializer:
            i.name = names.get(i.name, i.name)
    for o in graph.output:
        o.name = names.get(o.name, o.name)


def _unproduced_outputs(model: ModelProto) -> list[str]:
    g = model.graph
    have = {o for n in g.node for o in n.output} | {i.name for i in [*g.initializer, *g.input]}
    return [o.name for o in g.output if o.name not in have]
