"""The weight variants of precision=auto's switchboard (mixed_graphs.MixedSwitchboard):
every type's value of every candidate weight, computed once before the search runs, and the
file its ONNX Runtime session opens.

A small model stores each variant widened to fp32 (each search step then runs the GEMMs
only); a model whose weights are in external data stores them narrow (int4, int8/fp8,
fp16) and widens each just before its GEMM in every step, so the session holds the
weights once and each variant at a fraction of their bytes."""

from __future__ import annotations

import collections
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.export import onnx_model, onnx_runtime
from pipeline.precision import int4_graphs

if TYPE_CHECKING:
    from pipeline.export.external_data import Gathered


@contextlib.contextmanager
def session_file(model: Any, base_dir: Path | None, narrow: bool) -> Iterator[onnx_runtime.Graph]:
    """`model` folded (folded()) as the switchboard's session opens it. A graph naming the
    source's files is written to one data file in a folder of its own: each variant as it
    is made, then the source's weights copied across, so that the graph never holds the
    variants' bytes (a protobuf message keeps what it held until it is freed whole) and
    the process holds them once, in ONNX Runtime, beside one copy of the weights."""
    from pipeline.export.external_data import Gathered
    from pipeline.precision import streamed

    if not streamed.external_data(model):
        with onnx_runtime.model_file(folded(model, base_dir, narrow), base_dir) as f:
            yield f
        return
    with tempfile.TemporaryDirectory(prefix="switchboard.") as tmp:
        path = Path(tmp) / "model.onnx"
        with Gathered(path, base_dir) as gathered:
            gathered.finish(folded(model, base_dir, narrow, gathered))
        yield path


def _widening(node: Any) -> bool:
    """A DequantizeLinear, or a Cast to fp32: what turns a narrow stored weight into the
    fp32 value a GEMM reads."""
    if node.op_type == "DequantizeLinear":
        return True
    return node.op_type == "Cast" and any(a.name == "to" and a.i == 1 for a in node.attribute)


def folded(m: Any, base_dir: Path | None, narrow: bool, gathered: Gathered | None = None) -> Any:
    """`m` with every variant of a weight (its int4 or int8 DequantizeLinear, its fp16
    rounding) computed once: stored as an fp32 initializer, so that a search step runs the
    GEMMs and the activations' variants only, or with `narrow` stored as the narrow value
    (an int8/fp8 QuantizeLinear's output, an fp16 rounding's fp16 half, an int4 weight as
    it is) with its widening node (DequantizeLinear, Cast to fp32) left to run each step:
    0.125 to 0.5 times the weights' bytes a variant instead of an fp32 copy each. The
    values are ONNX Runtime's either way (the same kernels, once or every step). By hand,
    not Polygraphy's fold_constants: ONNX-GraphSurgeon never folds Q/DQ nodes (TensorRT wants them kept),
    which is right for a graph to build and wrong for this one, which is only ever judged.
    The constant nodes run a chunk at a time (_chunks); with `gathered` each variant goes
    to its data file as it is made."""
    known = {i.name for i in m.graph.initializer}
    constant = []
    for node in m.graph.node:  # in topological order: qdq_plan.reorder ran
        if all(not x or x in known for x in node.input) and not (narrow and _widening(node)):
            constant.append(node)
            known.update(node.output)
    if not constant:
        return m
    folding = {id(n) for n in constant}
    kept = [n for n in m.graph.node if id(n) not in folding]
    produced = {o for n in constant for o in n.output}
    wanted = {x for n in kept for x in n.input if x in produced}
    chunks = _chunks(constant, m, wanted)
    from onnx import numpy_helper

    types = _quantized_types(constant, m)
    del m.graph.node[:]
    m.graph.node.extend(_just_in_time(_lazy(kept)) if narrow else kept)
    for values in chunks:
        folded = onnx_runtime.run_model(values, [{}], base_dir)[0]
        for x in list(folded):  # one variant at a time: its array let go as its tensor is made
            tensor = numpy_helper.from_array(folded.pop(x), x)
            if x in types:  # fp8 comes back from ONNX Runtime as its bytes, typed uint8
                tensor.data_type = types[x]
            if gathered is not None and gathered.takes(tensor):
                gathered.add(tensor)
            m.graph.initializer.append(tensor)
    return int4_graphs.pruned(m)


# bytes of weights one folding session reads: one session over every constant node would
# hold every fp32 weight and every variant at once (2.46 GB encoder: 1.9x the model's bytes)
FOLD_BYTES = 256 << 20


def _chunks(nodes: list[Any], m: Any, wanted: set[str]) -> list[Any]:
    """Graphs of the constant `nodes` that compute the `wanted` tensors, each reading about
    FOLD_BYTES of initializers at most (a node and the constant nodes it reads from stay in
    one graph), with the initializers they read (external ones by reference)."""
    from onnx import helper

    inits = {i.name: i for i in m.graph.initializer}
    graphs: list[Any] = []
    chunk: list[Any] = []
    size = 0
    for group in _connected(nodes):
        chunk += group
        size += sum(onnx_model.tensor_bytes(inits[x]) for x in _reads(group) if x in inits)
        if size >= FOLD_BYTES:
            graphs.append(_graph_of(chunk, m, inits, wanted, helper))
            chunk, size = [], 0
    if chunk:
        graphs.append(_graph_of(chunk, m, inits, wanted, helper))
    return [g for g in graphs if g is not None]


def _graph_of(
    chunk: list[Any], m: Any, inits: dict[str, Any], wanted: set[str], helper: Any
) -> Any:
    outs = sorted({o for n in chunk for o in n.output} & wanted)
    if not outs:
        return None
    return helper.make_model(
        helper.make_graph(
            chunk,
            "weight variants",
            [],
            [helper.make_empty_tensor_value_info(x) for x in outs],
            [inits[x] for x in sorted(_reads(chunk)) if x in inits],
        ),
        opset_imports=m.opset_import,
        ir_version=m.ir_version,
    )


def _reads(nodes: list[Any]) -> set[str]:
    return {x for n in nodes for x in n.input if x}


def _connected(nodes: list[Any]) -> list[list[Any]]:
    """`nodes` in groups joined by what one produces and another reads (not by the
    initializers they share: a scale read by many would join them all), each group in
    the nodes' order, the groups by their first node."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    parent = list(range(len(nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, n in enumerate(nodes):
        for x in n.input:
            if x in producer:
                parent[root(i)] = root(producer[x])
    groups: dict[int, list[Any]] = {}
    for i, n in enumerate(nodes):
        groups.setdefault(root(i), []).append(n)
    return list(groups.values())


def _lazy(nodes: list[Any]) -> list[Any]:
    """Each Where that picks a widened variant (flag, variant, the rest) as an If whose then
    branch widens it, the rest's Where nested in its else branch: ONNX Runtime runs only the
    branch taken, so a search step widens the variants its assignment uses and no other
    (every variant of every weight, each step, before: most of a step's time on a large
    model). The values are the same nodes' either way."""
    producer = {o: n for n in nodes for o in n.output}
    readers = collections.Counter(x for n in nodes for x in n.input)

    def picks_variant(n: Any) -> bool:
        widen = producer.get(n.input[1]) if n.op_type == "Where" else None
        return widen is not None and _widening(widen) and readers[n.input[1]] == 1

    lazy = {id(n) for n in nodes if picks_variant(n)}
    inside: set[int] = set()  # nodes moved into a branch

    def as_if(where: Any) -> Any:
        from onnx import TensorProto, helper

        widen, rest = producer[where.input[1]], producer.get(where.input[2])
        inside.add(id(widen))
        if rest is not None and id(rest) in lazy and readers[where.input[2]] == 1:
            inside.add(id(rest))
            otherwise, out = as_if(rest), rest.output[0]
        else:
            out = f"{where.output[0]}::else"
            otherwise = helper.make_node("Identity", [where.input[2]], [out])

        def branch(node: Any, name: str) -> Any:
            result = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
            return helper.make_graph([node], f"{where.output[0]}::{node.op_type}", [], [result])

        return helper.make_node(
            "If",
            [where.input[0]],
            list(where.output),
            name=f"{where.output[0]}::if",
            then_branch=branch(widen, widen.output[0]),
            else_branch=branch(otherwise, out),
        )

    # outermost first (a chain's last Where), so each inner one is already taken
    ifs = {id(n): as_if(n) for n in reversed(nodes) if id(n) in lazy and id(n) not in inside}
    return [ifs.get(id(n), n) for n in nodes if id(n) not in inside]


def _just_in_time(nodes: list[Any]) -> list[Any]:
    """`nodes` with each widening node moved to just before its first reader. ONNX Runtime
    runs nodes in the graph's order where it may, so a DequantizeLinear placed at the top
    (all of them read initializers only) would widen every variant of every weight before
    the first GEMM ran, and hold them all."""
    widening = {id(n) for n in nodes if _widening(n)}
    before: dict[int, list[Any]] = {}
    first_reader: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for x in n.input:
            first_reader.setdefault(x, i)
    for n in nodes:
        if id(n) in widening:
            at = min((first_reader.get(o, len(nodes)) for o in n.output), default=len(nodes))
            before.setdefault(at, []).append(n)
    out = []
    for i, n in enumerate(nodes):
        out += before.get(i, [])
        if id(n) not in widening:
            out.append(n)
    return out + before.get(len(nodes), [])


def _quantized_types(nodes: list[Any], m: Any) -> dict[str, int]:
    """The ONNX type of each QuantizeLinear output among `nodes`: its zero point's."""
    zero_points = {i.name: i.data_type for i in m.graph.initializer}
    return {
        n.output[0]: zero_points[n.input[2]]
        for n in nodes
        if n.op_type == "QuantizeLinear" and len(n.input) > 2 and n.input[2] in zero_points
    }
