"""The weight variants of the searches' switchboards (precision=auto's
mixed/graphs.MixedSwitchboard, the fallback's qdq/graphs.py): every type's value of every
candidate weight, computed once before the search runs, and the file its ONNX Runtime
session opens. In the families' common room as the searches' shared kit.

A small model stores each variant widened to fp32 (each search step then runs the GEMMs
only); a model whose weights are in external data stores them narrow (int4, int8/fp8,
fp16) and widens each just before its GEMM in every step, so the session holds the
weights once and each variant at a fraction of their bytes."""

from __future__ import annotations

import collections
import contextlib
import copy
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.graph import onnx_model, onnx_runtime
from pipeline.precision.common.ops import pruned

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.graph.external_data import Gathered

# The name of every Where the switchboard adds to pick a variant (mixed/graphs.py). Its nodes
# are told from the model's own by this name, never by op type: a BERT attention mask or a
# GPT-2 causal mask is a Where too, reading a constant that only it reads.
PICK = "switchboard::pick::"


def pick(flag: str, yes: str, no: str, out: str | None = None) -> Any:
    """The switchboard's Where: `yes` where `flag` is set, else `no` (as `out`)."""
    from onnx import helper

    out = out or f"{yes}::or::{no}"
    return helper.make_node("Where", [flag, yes, no], [out], name=f"{PICK}{out}")


def switchboard_session(
    model: ModelProto, base_dir: Path | None, narrow: bool | None = None
) -> Any:  # an onnxruntime InferenceSession (onnxruntime ships no type information)
    """The ONNX Runtime session of a switchboard graph (its picks named PICK), each GEMM's
    picks run as Ifs (session_file). `narrow` (None: by the model): a model whose weights
    are in external data (a large one) keeps the variants narrow, each widened in an If
    branch only when its GEMM takes it; a small one stores them widened, which made each
    step faster (MiniLM-size: 43 s cold against 51 s, 4.8 s against 7.6 s with cached
    figures, measured before each GEMM ran in its If)."""
    from pipeline.core import memory
    from pipeline.precision.common import streamed

    if narrow is None:
        narrow = streamed.external_data(model)
    if narrow:
        memory.large_blocks_returned()
    with session_file(model, base_dir, narrow) as f:
        # folding would widen each narrow variant to an fp32 copy again
        return onnx_runtime.ort_session(f, basic_optimizations=True, fold_constants=not narrow)


@contextlib.contextmanager
def session_file(
    model: ModelProto, base_dir: Path | None, narrow: bool
) -> Iterator[onnx_runtime.Graph]:
    """`model` folded (folded()) as the switchboard's session opens it. A graph naming the
    source's files is written to one data file in a folder of its own: each variant as it
    is made, then the source's weights copied across, so that the graph never holds the
    variants' bytes (a protobuf message keeps what it held until it is freed whole) and
    the process holds them once, in ONNX Runtime, beside one copy of the weights."""
    from pipeline.graph.external_data import Gathered
    from pipeline.precision.common import streamed

    if not streamed.external_data(model):
        # folded() rewrites `model` in place, so it is the session's to give up: past the
        # inline limit its weights move to the file instead of being copied first (the
        # fallback's switchboard consumed its graph so before it shared this path)
        graph = folded(model, base_dir, narrow)
        with onnx_runtime.model_file(graph, base_dir, consume=True) as f:
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


def folded(
    m: ModelProto, base_dir: Path | None, narrow: bool, gathered: Gathered | None = None
) -> Any:
    """`m` with every variant of a weight (its int4 or int8 DequantizeLinear, its fp16
    rounding) computed once: stored as an fp32 initializer, so that a search step runs the
    GEMMs and the activations' variants it picks only (_lazy), or with `narrow` stored as
    the narrow value (an int8/fp8 QuantizeLinear's output, an fp16 rounding's fp16 half,
    an int4 weight as it is) with its widening node (DequantizeLinear, Cast to fp32) left
    to run each step: 0.125 to 0.5 times the weights' bytes a variant instead of an fp32
    copy each. The values are ONNX Runtime's either way (the same kernels, once or every
    step). By hand, not Polygraphy's fold_constants: ONNX-GraphSurgeon never folds Q/DQ
    nodes (TensorRT wants them kept), which is right for a graph to build and wrong for
    this one, which is only ever judged.
    The constant nodes run a chunk at a time (_chunks); with `gathered` each variant goes
    to its data file as it is made."""
    known = {i.name for i in m.graph.initializer}
    constant = []
    for node in m.graph.node:  # in topological order: ops.reorder ran
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
    stored = known - produced | wanted  # the initializers, and the variants folded below
    m.graph.node.extend(_just_in_time(_lazy(kept, stored)) if narrow else _lazy(kept, stored))
    for values in chunks:
        folded = onnx_runtime.run_model(values, [{}], base_dir)[0]
        for x in list(folded):  # one variant at a time: its array let go as its tensor is made
            tensor = numpy_helper.from_array(folded.pop(x), x)
            if x in types:  # fp8 comes back from ONNX Runtime as its bytes, typed uint8
                tensor.data_type = types[x]
            if gathered is not None and gathered.takes(tensor):
                gathered.add(tensor)
            m.graph.initializer.append(tensor)
    return pruned(m)


# bytes of weights one folding session reads: one session over every constant node would
# hold every fp32 weight and every variant at once (2.46 GB encoder: 1.9x the model's bytes)
FOLD_BYTES = 256 << 20


def _chunks(nodes: list[Any], m: ModelProto, wanted: set[str]) -> list[Any]:
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
    chunk: list[Any], m: ModelProto, inits: dict[str, Any], wanted: set[str], helper: Any
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


def _lazy(nodes: list[Any], stored: set[str]) -> list[Any]:
    """Each Where that picks a variant (flag, variant, the rest) as an If whose then branch
    widens it (or reads it, stored widened), the rest's Where nested in its else branch:
    ONNX Runtime runs only the branch taken, so a search step widens the variants its
    assignment uses and no other (every variant of every weight, each step, before: most
    of a step's time on a large model), and computes an activation's variants only where
    they are picked. Where the chain picks a weight for one GEMM, that GEMM runs inside
    each branch too, so the If yields the GEMM's result: an If (or a Where) that yields
    the weight hands its reader a copy of it (fp32 for a weight left in fp32), and ONNX
    Runtime keeps an If's outputs until the step ends (2.46 GB encoder: 2.2 GB of such
    copies at a step's peak; MiniLM-size: half of a step's time). The values are the same
    nodes' either way."""
    producer = {o: n for n in nodes for o in n.output}
    readers: dict[str, list[Any]] = collections.defaultdict(list)
    for n in nodes:
        for x in set(n.input):
            readers[x].append(n)

    def picks_variant(n: Any) -> bool:
        if not n.name.startswith(PICK) or len(readers[n.input[1]]) != 1:
            return False
        widen = producer.get(n.input[1])
        return n.input[1] in stored if widen is None else _widening(widen)

    lazy = {id(n) for n in nodes if picks_variant(n)}
    inside: set[int] = set()  # nodes moved into a branch

    def chain(where: Any) -> list[Any]:
        """The Wheres of `where`'s chain, outermost first."""
        links = [where]
        rest = producer.get(where.input[2])
        while rest is not None and id(rest) in lazy and len(readers[where.input[2]]) == 1:
            links.append(rest)
            where, rest = rest, producer.get(rest.input[2])
        return links

    chains: dict[int, list[Any]] = {}  # outermost Where -> its chain
    for n in reversed(nodes):
        if id(n) in lazy and id(n) not in inside:
            chains[id(n)] = chain(n)
            inside.update(id(w) for w in chains[id(n)][1:])
    gemm_of = _gemms_taking(chains, producer, readers)
    ifs = {}
    for top_id, links in chains.items():
        top, gemm = links[0], gemm_of.get(top_id)
        inside.update(id(producer[w.input[1]]) for w in links if w.input[1] in producer)
        if gemm is None:
            ifs[top_id] = _if_chain(links, producer, list(top.output), None, top.output[0])
        else:
            inside.update({top_id, id(gemm)})
            ifs[id(gemm)] = _if_chain(links, producer, list(gemm.output), gemm, top.output[0])
    return [ifs.get(id(n), n) for n in nodes if id(n) not in inside or id(n) in ifs]


def _gemms_taking(
    chains: dict[int, list[Any]], producer: dict[str, Any], readers: dict[str, list[Any]]
) -> dict[int, Any]:
    """For each chain (by its outermost Where) that picks a weight, the one GEMM that reads
    it, which then runs in the chain's branches; a GEMM joins one chain at most (a weight's
    first: an activation's variants are copies of an activation anyway)."""
    from pipeline.precision.common import ops

    taken: dict[int, Any] = {}
    joined: set[int] = set()
    for weights_first in (True, False):
        for top_id, links in chains.items():
            out = links[0].output[0]
            if top_id in taken or (links[-1].input[2] not in producer) != weights_first:
                continue
            if len(readers[out]) != 1 or len(readers[out][0].output) != 1:
                continue
            gemm = readers[out][0]
            if gemm.op_type in ops.GEMMS and id(gemm) not in joined:
                taken[top_id] = gemm
                joined.add(id(gemm))
    return taken


def _if_chain(
    links: list[Any], producer: dict[str, Any], outs: list[str], gemm: Any, picked: str
) -> Any:
    """The If for a chain of Wheres (outermost first) that yields `outs`: the picked
    variant, or with `gemm` (which reads it as `picked`, the chain's output) the GEMM's
    result computed from it in the branch taken."""
    from onnx import TensorProto, helper

    where = links[0]
    widen = producer.get(where.input[1])  # None: a variant stored as it is read

    def branch(label: str, value: str, first: list[Any]) -> Any:
        if gemm is None:
            node_outs = [value] if first else [f"{outs[0]}::{label}"]
            body = first or [helper.make_node("Identity", [value], node_outs)]
        else:
            reader = copy.deepcopy(gemm)
            reader.input[:] = [value if x == picked else x for x in gemm.input]
            reader.output[:] = node_outs = [f"{o}::{label}" for o in gemm.output]
            reader.name = f"{gemm.name}::{label}"
            body = [*first, reader]
        results = [helper.make_tensor_value_info(x, TensorProto.FLOAT, None) for x in node_outs]
        return helper.make_graph(body, f"{outs[0]}::{label}", [], results)

    if widen is None:
        then = branch(f"with::{where.input[1]}", where.input[1], [])
    else:
        then = branch(f"with::{widen.output[0]}", widen.output[0], [widen])
    if len(links) > 1:
        inner_outs = [f"{o}::else::{where.output[0]}" for o in outs]
        inner = _if_chain(links[1:], producer, inner_outs, gemm, picked)
        otherwise = helper.make_graph(
            [inner],
            f"{outs[0]}::else::{where.output[0]}",
            [],
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, None) for x in inner_outs],
        )
    else:
        otherwise = branch(f"else::{where.output[0]}", where.input[2], [])
    return helper.make_node(
        "If",
        [where.input[0]],
        outs,
        name=f"{outs[0]}::if",
        then_branch=then,
        else_branch=otherwise,
    )


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


def _quantized_types(nodes: list[Any], m: ModelProto) -> dict[str, int]:
    """The ONNX type of each QuantizeLinear output among `nodes`: its zero point's."""
    zero_points = {i.name: i.data_type for i in m.graph.initializer}
    return {
        n.output[0]: zero_points[n.input[2]]
        for n in nodes
        if n.op_type == "QuantizeLinear" and len(n.input) > 2 and n.input[2] in zero_points
    }
