"""The record of a precision=auto search, as calibration.json and the report keep it: each
GEMM's type with its weight bytes and why (the sensitivities it weighed), and each graph
judged with the Pareto front of weight bytes against gate score."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from pipeline.precision.mixed.graphs import Assignment, MixedGraphs
from pipeline.precision.mixed.tradeoff import Tradeoff

if TYPE_CHECKING:
    from pipeline.precision.gate.evaluator import SearchJudgement


class AutoCalibration(TypedDict):
    """calibration.json's `calibration` under precision=auto: each type's own record."""

    types: dict[str, dict[str, Any]]  # type -> its family's calibration record
    data: dict[str, Any] | None  # the calibration data's description; None: none was read
    untransposed_source: bool  # the source stores Gemm weights untransposed (make.py)


class AutoSummary(TypedDict):
    """What precision=auto adds to calibration.json (make._summary)."""

    calibration: AutoCalibration
    mixed: dict[str, Any]  # the search's record
    # how many reference samples were calibration samples too; absent where no type read data
    reference_overlap: NotRequired[dict[str, int]]


def rows(graphs: MixedGraphs, trade: Tradeoff, best: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    for node, kinds in trade.options.items():
        kind = best.get(node, "fp32")
        rows.append(
            {
                "node": node,
                "op_type": graphs._op_type(node),
                "type": kind,
                "weight_bytes": trade.sizes[node][kind],
                "fp32_weight_bytes": trade.sizes[node]["fp32"],
                "sensitivity": dict(trade.sens[node]),
                "why": why(trade, node, kind, kinds),
            }
        )
    return rows


def why(trade: Tradeoff, node: str, kind: str, kinds: list[str]) -> str:
    cheaper = kinds[: kinds.index(kind)]
    if not cheaper:
        return f"the cheapest type it takes (sensitivity {trade._s(node, kind):.3g})"
    alone = [t for t in cheaper if t not in trade.allowed(node)]
    failing = f"{', '.join(alone)} {'misses' if len(alone) == 1 else 'miss'} the gate on its own"
    if len(alone) == len(cheaper):
        return failing
    here = trade._s(node, kind)
    costly = [t for t in cheaper if t not in alone and trade.sens[node][t] > here]
    together = [t for t in cheaper if t not in alone and t not in costly]
    reasons = []
    if together:
        reasons.append(
            f"{', '.join(together)} {'passes' if len(together) == 1 else 'pass'} the gate alone "
            f"(sensitivity {', '.join(f'{trade.sens[node][t]:.3g}' for t in together)}) but "
            "not with the other GEMMs' cheaper types chosen first"
        )
    if costly:
        reasons.append(
            "cheaper types cost the gate more than their bytes are worth here (sensitivity "
            f"{', '.join(f'{t} {trade.sens[node][t]:.3g}' for t in costly)} against {here:.3g})"
        )
    if alone:
        reasons.append(failing)
    return "; ".join(reasons)


class GraphPoint(TypedDict):
    """One graph the search judged, a point of the mixed view's picture."""

    graph: str  # "chosen", "all int8", ...
    weight_bytes: int
    score: float
    passed: bool


def point(
    label: str, assignment: Assignment, trade: Tradeoff, judged: SearchJudgement
) -> GraphPoint:
    return {
        "graph": label,
        "weight_bytes": trade.bytes(assignment),
        "score": judged["score"],
        "passed": judged["passed"],
    }


def pareto(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The graphs no other graph beats on both weight bytes and score."""
    front = [
        p
        for p in points
        if not any(
            q["weight_bytes"] <= p["weight_bytes"]
            and q["score"] <= p["score"]
            and (q["weight_bytes"], q["score"]) != (p["weight_bytes"], p["score"])
            for q in points
        )
    ]
    unique = {(p["weight_bytes"], p["score"]): p for p in front}
    return sorted(unique.values(), key=lambda p: p["weight_bytes"])
