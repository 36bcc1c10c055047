"""Structure for the fallback search: which repeated block (layer) a node sits in and
which role it plays there, read from the graph rather than from a model family's names.

A layer is the first component of a node's name path that ends in an index
(`/encoder/layer.3/attention/self/query/MatMul` -> `/encoder/layer.3`), as
`torch.onnx.export` names nodes after the module tree. A role is the node's name with
that index replaced (`/encoder/layer.*/attention/self/query/MatMul`), so the same
projection of every layer is one role; nodes of one layer that read one tensor (the
query, key and value projections after a LayerNorm) are one role together. Graphs
whose names have no such structure fall back to contiguous runs in graph order, the
way Polygraphy's `debug precision` bisects. A search whose kept roles hold many nodes
ranks them a layer at a time first (`layer_blocks`)."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onnx import ModelProto

_INDEXED = re.compile(r"^(?P<stem>.*?[A-Za-z_])[._-]?(?P<index>\d+)$")
OUTSIDE = "(outside the repeated layers)"


@dataclass(frozen=True)
class Group:
    name: str
    nodes: tuple[str, ...]


def layer_and_role(name: str) -> tuple[str, str]:
    parts = name.split("/")
    for i, part in enumerate(parts[:-1]):
        m = _INDEXED.match(part)
        if m and part:
            starred = [*parts[:i], part[: m.start("index")] + "*", *parts[i + 1 :]]
            return "/".join(parts[: i + 1]), "/".join(starred)
    return OUTSIDE, name


def role_groups(model: ModelProto, candidates: list[str]) -> list[Group]:
    """Candidates grouped by role, in graph order of each role's first node."""
    nodes = {n.name: n for n in model.graph.node}
    weights = {i.name for i in model.graph.initializer}
    roles: dict[str, str] = {}
    by_input: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name in candidates:
        layer, role = layer_and_role(name)
        roles[name] = role
        node = nodes[name]
        activation = next((x for x in node.input if x and x not in weights), "")
        if layer != OUTSIDE and activation:
            by_input[(layer, activation)].append(name)
    # Projections of one layer reading one tensor (Q, K and V) form one role.
    for siblings in by_input.values():
        if len(siblings) > 1:
            joined = " + ".join(sorted({roles[s] for s in siblings}))
            for s in siblings:
                roles[s] = joined
    grouped: dict[str, list[str]] = defaultdict(list)
    for name in candidates:
        grouped[roles[name]].append(name)
    groups = [Group(role, tuple(members)) for role, members in grouped.items()]
    if len(groups) == len(candidates) and len(candidates) > 3:
        return contiguous_runs(candidates)
    return groups


def contiguous_runs(candidates: list[str]) -> list[Group]:
    """About sqrt(n) runs of neighbouring nodes, for graphs with no layer structure."""
    size = max(1, math.ceil(math.sqrt(len(candidates))))
    return [
        Group(f"nodes {i + 1}-{min(i + size, len(candidates))} in graph order", tuple(run))
        for i in range(0, len(candidates), size)
        if (run := candidates[i : i + size])
    ]


def layer_blocks(nodes: list[str]) -> list[Group]:
    """`nodes` by the layer they sit in (a decoder layer's attention and MLP nodes of the
    kept roles), in order of each layer's first node; nodes outside the repeated layers (an
    LM head) are a block of their own."""
    blocks: dict[str, list[str]] = defaultdict(list)
    for name in nodes:
        blocks[layer_and_role(name)[0]].append(name)
    return [Group(layer, tuple(members)) for layer, members in blocks.items()]
