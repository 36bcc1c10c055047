"""The fallback search's record, as calibration.json keeps it: each judgement in the
search's terms, what was quantized and stays so, and a row per group and per node with
its sensitivity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from pipeline.precision.common import ops
from pipeline.precision.gate.evaluator import SearchJudgement

if TYPE_CHECKING:
    from pipeline.precision.common.searchable import SearchPlan
    from pipeline.precision.fallback.groups import Group


class NodeCounts(TypedDict):
    """How many nodes were quantized and how many stay so (calibration.json's fallback)."""

    quantized_nodes: int
    quantized_matmuls: int
    matmuls_still_quantized: int
    quantized_gemms: int
    gemms_still_quantized: int
    gemms_by_op: dict[str, dict[str, int]]  # op type -> still_quantized, quantized


def counts(plan: SearchPlan, candidates: list[str], kept: list[str]) -> NodeCounts:
    """How many matrix multiplies, and convolutions with them (what a CNN's int8 is about),
    were quantized and stay so, by op type."""
    matmuls = [c for c in candidates if plan.op_types[c] in ops.MATMULS]
    gemms = [c for c in candidates if plan.op_types[c] in ops.GEMMS]
    by_op: dict[str, list[int]] = {}
    for c in gemms:
        counts = by_op.setdefault(plan.op_types[c], [0, 0])
        counts[0] += c not in kept
        counts[1] += 1
    return {
        "quantized_nodes": len(candidates),
        "quantized_matmuls": len(matmuls),
        "matmuls_still_quantized": sum(1 for n in matmuls if n not in kept),
        "quantized_gemms": len(gemms),
        "gemms_still_quantized": sum(1 for n in gemms if n not in kept),
        "gemms_by_op": {op: {"still_quantized": a, "quantized": b} for op, (a, b) in by_op.items()},
    }


def group_rows(
    groups: list[tuple[Group, SearchJudgement]], n_groups: int, base: float
) -> list[dict[str, Any]]:
    return [
        {
            "group": g.name,
            "nodes": list(g.nodes),
            "score_quantized_alone": r["score"],
            "sensitivity": round(r["score"] - base, 6),
            "kept": i < n_groups,
        }
        for i, (g, r) in enumerate(groups)
    ]


def node_rows(
    nodes: list[tuple[Group, SearchJudgement]],
    plan: SearchPlan,
    groups: list[Group],
    kept: list[str],
    base: float,
) -> list[dict[str, Any]]:
    group_of = {n: g.name for g in groups for n in g.nodes}
    return [
        {
            "node": u.name,
            "op_type": plan.op_types[u.name],
            "group": group_of[u.name],
            "score_quantized_alone": r["score"],
            "sensitivity": round(r["score"] - base, 6),
            "kept": u.name in kept,
        }
        for u, r in nodes
    ]
