"""FallbackSearch: accuracy-driven mixed precision for a Q/DQ graph that misses its
gate (precision.fallback=auto), on the CPU before any build, so it serves every
TensorRT flavour alike (Polygraphy's `debug precision` needs a GPU and an engine; its
bisection is what this search copies, on ONNX Runtime).

The unit is a node that reads a quantized value (common/searchable.SearchPlan.candidates); keeping
it in fp32 rewrites the fp32 source graph so that node reads the unquantized tensors
and the source weights, so keeping every candidate gives the fp32 graph bit for bit.
On the held-out reference batches with ONNX Runtime:

1. the graph with every candidate kept must pass, else no subset can and the search
   stops, naming what it measured;
2. groups before nodes: candidates are grouped by role across layers
   (fallback/groups.py: Q/K/V, attention, attention output, FFN in, FFN out, ...); each
   group is measured quantized alone (every other candidate kept), and the fewest most
   sensitive groups to keep are found by bisection;
3. where the kept groups hold more than BLOCKS_PAST nodes (a decoder of 30 layers: 90),
   their nodes are taken a layer at a time: each layer's block measured quantized alone,
   the fewest most sensitive blocks kept by bisection;
4. inside the kept groups (or blocks) only, each node is measured quantized alone, and the
   fewest most sensitive nodes to keep are found by bisection; after blocks, only while
   they hold at most NODE_LIMIT nodes, else the kept blocks' nodes are what is kept.

Every step runs in one ONNX Runtime session (common/searchable.Switchboard: a flag per node
picks its quantized or its fp32 inputs), so a step costs one pass over the held-out
batches, not a graph to build and load. The gate score (gate/evaluator.py) is one number
per graph: the worst of every gated metric's distance to its threshold, scaled so that 1.0
is the threshold (<= 1 passes)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PipelineError
from pipeline.precision.common import search_progress
from pipeline.precision.common.figures_memo import FiguresMemo
from pipeline.precision.fallback import groups, record_rows
from pipeline.precision.fallback.groups import Group
from pipeline.precision.gate import accuracy
from pipeline.precision.gate.evaluator import Evaluator, SearchJudgement
from pipeline.records.calibration_file import FallbackRecord, Judgement

if TYPE_CHECKING:
    from pipeline.precision.common.searchable import Searchable, Switchboard

SEARCH_VERSION = 8  # the record's shape and the search's steps; 7: ranked on a subset;
# 8: the switchboard's GEMMs run in Ifs (common/variants.py), within fp32 rounding of 7's
# Past this many nodes in the kept groups, layer blocks come before nodes; past NODE_LIMIT
# in the kept blocks, the search stops at blocks. On a decoder of SmolLM-135M's shape, 90
# nodes measured one at a time were most of a search of 40 minutes; at these sizes every
# search the tests and tutorials run keeps its node-level steps (and its cached records).
BLOCKS_PAST = 48
NODE_LIMIT = 32


class SearchFailed(PipelineError):
    """No graph the search may build passes; `record` says what was measured, `plain`
    (set by the caller) is the plain Q/DQ graph's judgement for the metrics file."""

    def __init__(self, line: str, record: Mapping[str, Any]) -> None:
        super().__init__(line)
        self.record = record
        self.plain: Judgement | None = None


def _bisect(
    items: list[Group],
    passes: Callable[[list[Group]], SearchJudgement],
    steps: list[dict[str, Any]],
    stage: str,
) -> int:
    """The fewest leading items whose keeping passes; keeping all of them is known to
    pass and keeping none is known to fail."""
    lo, hi = 0, len(items)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        result = passes(items[:mid])
        steps.append({"stage": stage, "kept": mid, **result})
        if result["passed"]:
            hi = mid
        else:
            lo = mid
    return hi


def search(
    graphs: Searchable,
    pairs: list[accuracy.ReferenceBatch],
    criteria: accuracy.Criteria,
    plain: SearchJudgement,
    memo: FiguresMemo | None = None,
) -> FallbackRecord:
    """The record of the search for the fewest most-sensitive candidates to keep out of the
    low type that pass (its `kept`); the caller writes that graph and judges it as written.
    `plain`: the Q/DQ graph's judgement; `memo`: figures an earlier search measured."""
    candidates = graphs.plan.candidates()
    if not candidates:
        raise SearchFailed(
            "precision.fallback=auto: the Q/DQ graph has no quantized node to keep in "
            "higher precision",
            {"quantized_nodes": 0},
        )
    board = graphs.switchboard([p[0] for p in pairs])
    run = _Run(candidates, Evaluator(board.outputs, pairs, criteria, memo), board)
    roles = groups.role_groups(graphs.source, candidates)
    progress: search_progress.Progress[list[str]] = search_progress.Progress(
        "fallback search",
        search_progress.most_graphs(len(roles), len(candidates)),
        len,
        lambda kept: f"{kept:.0f} of {len(candidates)} kept in fp32",
    )
    run.keeping.progress = progress
    try:
        return _searched(graphs, run, roles, plain)
    finally:
        progress.close()


def _searched(
    graphs: Searchable, run: _Run, roles: list[Group], plain: SearchJudgement
) -> FallbackRecord:
    plan, candidates = graphs.plan, run.candidates
    everything = run.keeping(candidates)
    if not everything["passed"]:
        raise SearchFailed(
            f"precision.fallback=auto: even with all {len(candidates)} quantized nodes kept in "
            f"fp32 the graph misses the gate ({'; '.join(everything['failing'])}); that is the "
            f"fp32 graph, so the gate itself is out of reach on this reference data",
            {"quantized_nodes": len(candidates), "all_high_precision": everything},
        )
    # Groups (a role across layers) first, then the nodes of the groups that had to stay.
    groups = run.alone(roles, "group quantized alone")
    ordered = [g for g, _ in groups]
    n_groups = _bisect(ordered, run.keep_units, run.steps, "groups kept") if len(ordered) > 1 else 1
    base = everything["score"]
    pool = [Group(n, (n,)) for g in ordered[:n_groups] for n in g.nodes]
    blocks: list[tuple[Group, SearchJudgement]] = []
    n_blocks = 0
    if len(pool) > BLOCKS_PAST:
        pool, blocks, n_blocks = _kept_blocks(run, [u.name for u in pool])
    nodes: list[tuple[Group, SearchJudgement]] = []
    if blocks and len(pool) > NODE_LIMIT:  # the kept blocks are the answer
        kept = [u.name for u in pool]
    else:
        nodes, kept = _kept_nodes(run, pool, everything)
    record: FallbackRecord = {
        "mode": "auto",
        "needed": True,
        "placement": plan.placement,
        "kept": kept,  # every node kept out of the low type, most sensitive first
        "kept_fp32": kept,  # of them, those in fp32 (written_checks.kept_lower moves some)
        "kept_fp16": [],
        **record_rows.counts(plan, candidates, kept),
        "plain": {
            "score": plain["score"],
            "metrics": plain["metrics"],
            "failing": plain["failing"],
        },
        "all_high_precision": {"score": everything["score"], "metrics": everything["metrics"]},
        "groups": record_rows.group_rows(groups, n_groups, base),
        **({"blocks": record_rows.group_rows(blocks, n_blocks, base)} if blocks else {}),
        "nodes": record_rows.node_rows(nodes, plan, ordered, kept, base),
        "steps": run.steps,
        "graphs_evaluated": run.keeping.runs,
        **run.keeping.tally(),
    }
    return record


def _kept_blocks(
    run: _Run, pool: list[str]
) -> tuple[list[Group], list[tuple[Group, SearchJudgement]], int]:
    """The kept groups' nodes a layer at a time: each layer's block quantized alone, the
    fewest most sensitive kept by bisection. (the nodes of the kept blocks, the blocks
    ranked, how many kept)"""
    layers = groups.layer_blocks(pool)
    if len(layers) < 2:
        return [Group(n, (n,)) for n in pool], [], 0
    blocks = run.alone(layers, "block quantized alone")
    ordered = [b for b, _ in blocks]
    n_blocks = _bisect(ordered, run.keep_units, run.steps, "blocks kept")
    return [Group(n, (n,)) for b in ordered[:n_blocks] for n in b.nodes], blocks, n_blocks


def _kept_nodes(
    run: _Run, pool: list[Group], everything: SearchJudgement
) -> tuple[list[tuple[Group, SearchJudgement]], list[str]]:
    """Each node of `pool` quantized alone, the fewest most sensitive kept by bisection."""
    nodes = run.alone(pool, "node quantized alone") if len(pool) > 1 else [(pool[0], everything)]
    ranked = [u for u, _ in nodes]
    n_nodes = _bisect(ranked, run.keep_units, run.steps, "nodes kept") if len(ranked) > 1 else 1
    return nodes, [u.name for u in ranked[:n_nodes]]


class _Run:
    """One search's evaluator over the candidates, and the steps it took."""

    def __init__(
        self, candidates: list[str], keeping: Evaluator[list[str]], board: Switchboard
    ) -> None:
        self.candidates, self.keeping, self.board = candidates, keeping, board
        self.steps: list[dict[str, Any]] = []

    def alone(self, units: list[Group], stage: str) -> list[tuple[Group, SearchJudgement]]:
        """Each unit quantized alone (every other candidate kept), most sensitive first;
        after the first, from checkpoints where its time says they pay (common/checkpoints.py)."""
        if not units:
            return []
        started = time.perf_counter()
        results = {0: self._alone(units[0])}
        expected_s = (time.perf_counter() - started) * (len(units) - 1)
        with self.board.checkpointed(self.keeping.order.ranking, expected_s):
            # in graph order, so each cut's session opens once; recorded in the units' order
            for i in sorted(range(1, len(units)), key=lambda i: self.board.place(units[i].nodes)):
                results[i] = self._alone(units[i])
        out = [(unit, results[i]) for i, unit in enumerate(units)]
        self.steps += [{"stage": stage, "group": u.name, **result} for u, result in out]
        return sorted(out, key=lambda ur: -ur[1]["score"])

    def _alone(self, unit: Group) -> SearchJudgement:
        return self.keeping([c for c in self.candidates if c not in unit.nodes], ranked=True)

    def keep_units(self, units: list[Group]) -> SearchJudgement:
        return self.keeping([n for u in units for n in u.nodes])
