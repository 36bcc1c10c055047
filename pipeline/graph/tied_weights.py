"""Weights stored once: an initializer that holds another's values, or their transpose, is
read from the other.

A decoder with tied embeddings (GPT-2, Llama 3.2, Qwen2, Gemma, SmolLM) has one matrix for
its token table and its LM head, but `torch.onnx.export` writes it twice: the `Gather`'s
table `[vocab, hidden]` and the head's `MatMul` weight `[hidden, vocab]`, under names of the
exporter's choosing (`onnx::MatMul_718`). At a 49k vocabulary that copy is a fifth of a
135 M-parameter model. Found by value, whatever the names: the copy goes, and the head
reads the table through a `Transpose`, which TensorRT folds into one stored weight (an
fp16 engine of a tied Llama measured 4.1 MB smaller with it: the head's copy)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.graph import onnx_model
from pipeline.graph.external_data import mapped_apart

if TYPE_CHECKING:
    from onnx import ModelProto

# Smaller weights are left as they are: their copies cost little, the comparison would not.
MIN_BYTES = 64 << 10
FLOAT_TYPES = (1, 10, 16)  # float, float16, bfloat16
SUFFIX = "::tied"  # of the Transpose that stands for a dropped copy


@dataclass(frozen=True)
class Tie:
    kept: str  # the initializer both readers read now
    dropped: str  # the copy that went; a node of this name's output stands for it
    transposed: bool  # the copy held the kept one's transpose

    def line(self) -> str:
        how = "the transpose of" if self.transposed else "a copy of"
        return f"{self.dropped} is {how} {self.kept}"


def store_once(model: ModelProto, base: Path | None) -> list[Tie]:
    """`model` with each copy found by `find` dropped, its readers reading the kept weight
    (through a Transpose named for the copy where it was transposed); the ties made."""
    from onnx import helper

    ties = find(model, base)
    graph = model.graph
    dropped = {t.dropped: t for t in ties}
    for tie in ties:
        if tie.transposed:
            node = helper.make_node(
                "Transpose", [tie.kept], [tie.dropped], perm=[1, 0], name=f"{tie.dropped}{SUFFIX}"
            )
            graph.node.insert(0, node)
        else:
            for node in graph.node:
                node.input[:] = [tie.kept if x == tie.dropped else x for x in node.input]
    kept = [i for i in graph.initializer if i.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return ties


def is_tie(node: Any) -> bool:
    """Whether `node` is the Transpose store_once wrote for a dropped copy."""
    return bool(node.op_type == "Transpose" and node.name.endswith(SUFFIX))


def transposed_from(model: ModelProto) -> dict[str, str]:
    """Each tensor a tie's Transpose stands for (a dropped copy), by the weight it reads:
    a weight whose values are the kept one's transpose."""
    return {n.output[0]: n.input[0] for n in model.graph.node if is_tie(n)}


def find(model: ModelProto, base: Path | None) -> list[Tie]:
    """The copies of a Gather's table (2-D, float, MIN_BYTES or more): initializers of its
    type holding its values or their transpose. Only tables are looked for: a tied head is
    a table's copy, and comparing every pair of a decoder's same-shaped layer weights would
    read the whole model. Each candidate in external data is mapped once: a row of each pair
    is read, and the whole only where the rows agree. A copy read inside a subgraph, or named
    as a graph input or output, is left alone."""
    pinned = _pinned(model)
    candidates = [i for i in model.graph.initializer if _sized(i) and i.name not in pinned]
    tables = _gather_tables(model)
    ties: list[Tie] = []
    dropped: set[str] = set()
    weights = _Weights(base)
    for table in [c for c in candidates if c.name in tables]:
        if table.name in dropped:
            continue
        shape = sorted(table.dims)
        others = [
            c
            for c in candidates
            if c.name != table.name
            and c.name not in dropped
            and c.data_type == table.data_type
            and sorted(c.dims) == shape
        ]
        if not others:
            continue
        values = weights(table)
        for other in others:
            how = _repeats(values, weights(other))
            if how is not None:
                ties.append(Tie(table.name, other.name, how))
                dropped.add(other.name)
    return ties


class _Weights:
    """The candidates' values: one in external data mapped once, whatever tables share its
    shape (a row of it read where compared, not the whole; a model of 200 tables of one shape
    compares 40,000 pairs); one held in the graph read each time, as holding every one would
    copy the model."""

    def __init__(self, base: Path | None) -> None:
        self.base, self.maps = base, dict[str, np.ndarray]()

    def __call__(self, init: Any) -> np.ndarray:
        got = self.maps.get(init.name)
        if got is None:
            got = mapped_apart(init, self.base)
            if isinstance(got, np.memmap):
                self.maps[init.name] = got
        return got


def _repeats(kept: np.ndarray, other: np.ndarray) -> bool | None:
    """True where `other` is `kept` transposed, False where it equals it, else None. A row
    is compared first, so unrelated weights of one shape cost almost nothing."""
    if other.shape == kept.shape and np.array_equal(other[0], kept[0]):
        if np.array_equal(other, kept):
            return False
    if other.shape == kept.shape[::-1] and np.array_equal(other[:, 0], kept[0]):
        if np.array_equal(other, kept.T):
            return True
    return None


def _sized(init: Any) -> bool:
    return (
        init.data_type in FLOAT_TYPES
        and len(init.dims) == 2
        and onnx_model.tensor_bytes(init) >= MIN_BYTES
    )


def _pinned(model: ModelProto) -> set[str]:
    """Names read inside a subgraph (If/Loop bodies name outer tensors as they are) or
    naming a graph input or output: each must keep meaning the tensor it does."""
    io = {v.name for v in [*model.graph.input, *model.graph.output]}
    return io | _subgraph_reads(model.graph, top=True)


def _subgraph_reads(graph: Any, top: bool = False) -> set[str]:
    from onnx import AttributeProto

    names: set[str] = set()
    for node in graph.node:
        if not top:
            names.update(node.input)
        for attr in node.attribute:
            inner = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
            for g in inner:
                names |= _subgraph_reads(g)
    return names


def _gather_tables(model: ModelProto) -> set[str]:
    return {n.input[0] for n in model.graph.node if n.op_type == "Gather"}
