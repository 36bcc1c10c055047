"""The mixed-type search behind precision=auto: a type per GEMM (int4 weight-only, int8,
fp8, fp16, fp32) with the fewest weight bytes whose graph passes the gate, judged on the
held-out reference batches with ONNX Runtime in one session (mixed/graphs.py's
MixedSwitchboard).

1. The all-fp32 graph must pass, else no assignment can and the search stops.
2. Sensitivity: each (GEMM, type) alone, every other GEMM in fp32: how far it moves the gate
   score (fallback/search.py's score: 1.0 is the threshold). What is measured and cached by
   content are the accuracy figures, which any gate judges: a new gate measures nothing again.
3. The trade-off: for a weight lambda, each GEMM takes the type that minimises its share of
   the fp32 weight bytes plus lambda times its sensitivity (a type that fails the gate on
   its own is never taken). Bisection over lambda finds the cheapest assignment that passes.
4. A polish, in rounds: moves to the next cheaper type, most bytes saved per sensitivity
   first, the longest prefix that still passes found by bisection; the move that broke a
   round is left out of the next.

Sensitivities add up only roughly, so every step judges the whole graph; the record keeps
each graph judged (bytes, score) and the Pareto front of them, the single-type graphs too."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from pipeline.core import console
from pipeline.precision.common import search_progress
from pipeline.precision.common.figures_memo import FiguresMemo
from pipeline.precision.fallback.search import SearchFailed
from pipeline.precision.fallback.written import fewest_passing
from pipeline.precision.gate import accuracy
from pipeline.precision.gate.evaluator import Evaluator, SearchJudgement, judged, score
from pipeline.precision.mixed.graphs import TYPES, Assignment, MixedGraphs, MixedSwitchboard
from pipeline.precision.mixed.record import pareto, point, rows
from pipeline.precision.mixed.tradeoff import Sensitivity, Tradeoff
from pipeline.records.calibration_file import Judgement

SEARCH_VERSION = 3  # 2: the polish in rounds; 3: sensitivities on the ranking batches
LOG_LAMBDA = (-8.0, 4.0)  # the bisection's range of log10(lambda)
BY_NAME = 11  # 12 decades in 2^11 parts, 0.006 of a decade each

# node -> type -> accuracy figures of that GEMM alone in that type; "" -> {"fp32": all fp32's}
Figures = dict[str, dict[str, dict[str, dict[str, Any]]]]


class Judge:
    """Whole-graph judgements by assignment, each assignment judged once."""

    def __init__(
        self,
        outputs: Callable[[Assignment, list[int] | None], Any],
        pairs: list[accuracy.ReferenceBatch],
        criteria: accuracy.Criteria,
        memo: FiguresMemo | None = None,
    ) -> None:
        self.evaluator: Evaluator[Assignment] = Evaluator(outputs, pairs, criteria, memo)
        self.seen: dict[tuple[tuple[str, str], ...], SearchJudgement] = {}

    def __call__(self, assignment: Assignment) -> SearchJudgement:
        key = tuple(sorted((n, t) for n, t in assignment.items() if t != "fp32"))
        if key not in self.seen:
            self.seen[key] = self.evaluator(dict(key))
        return self.seen[key]


def search(
    graphs: MixedGraphs,
    pairs: list[accuracy.ReferenceBatch],
    criteria: accuracy.Criteria,
    cached_figures: Callable[[Callable[[], Figures]], tuple[Figures, bool]],
    code: Mapping[str, float] | None = None,
    memo: FiguresMemo | None = None,
) -> tuple[dict[str, str], dict[str, Any]]:
    """The assignment to build and the record of how it was found. `code`: the engine
    bytes a GEMM of each type adds beyond its weights (mixed/objective.py), so the search
    makes the engine smallest; without it, the weights. `memo`: the figures of whole graphs
    an earlier search judged (under any gate)."""
    started = time.perf_counter()
    candidates = graphs.candidates()
    if not candidates:
        raise SearchFailed(
            "precision=auto: the graph has no MatMul, Gemm or Conv with a constant weight that "
            "precision.search_types can take",
            {"candidates": 0},
        )
    board = graphs.switchboard([p[0] for p in pairs])
    judge = Judge(board.outputs, pairs, criteria, memo)
    options = {n: graphs.options(n) for n in candidates}
    sizes = {n: {t: graphs.weight_bytes(n, t) for t in options[n]} for n in candidates}
    figures, hit = cached_figures(lambda: _figures(judge, options, board))
    _check_base(judge, figures, len(candidates))
    sens = _sensitivity(figures, criteria)
    trade = Tradeoff(options, sizes, sens, dict(code or {}))
    points = {f"all {t}": trade.single(t) for t in TYPES if any(t in o for o in options.values())}
    progress: search_progress.Progress[Assignment] = search_progress.Progress(
        "precision=auto search",
        None,
        trade.cost,
        lambda b: f"{b / 1e6:.3g} MB of {'engine' if trade.code else 'weights'}",
    )
    judge.evaluator.progress = progress
    try:
        best = _bisect_lambda(judge, trade, points)
        best = _polish(judge, trade, best, points)
    finally:
        progress.close()
    points = {label: a for label, a in points.items() if a != best} | {"chosen": best}
    record = {
        "mode": "auto",
        "types": sorted({t for o in options.values() for t in o}, key=TYPES.index),
        "candidates": len(candidates),
        "assignment": rows(graphs, trade, best),
        "weight_bytes": trade.bytes(best),
        "fp32_weight_bytes": trade.bytes({}),
        # with code per layer (objective engine_bytes): the chosen GEMMs' weights and code
        "objective_bytes": round(trade.cost(best)),
        "counts": {t: sum(1 for n in candidates if best.get(n, "fp32") == t) for t in TYPES},
        "graphs": [point(label, a, trade, judge(a)) for label, a in points.items()],
        "graphs_judged": judge.evaluator.runs,
        **judge.evaluator.tally(),
        "figures_cache_hit": hit,
        "seconds": round(time.perf_counter() - started, 3),
    }
    record["pareto"] = pareto(cast("list[dict[str, Any]]", record["graphs"]))
    return best, record


def _check_base(judge: Judge, figures: Figures, candidates: int) -> None:
    """The all-fp32 graph's judgement, from its figures: it must pass, or nothing can."""
    whole = figures[""].get("all", figures[""]["fp32"])  # on every batch
    base = judged(accuracy.check_gate(whole, judge.evaluator.criteria.gate))
    judge.seen[()] = base
    if not base["passed"]:
        raise SearchFailed(
            f"precision=auto: the all-fp32 graph misses the gate ({'; '.join(base['failing'])}), "
            f"so the gate itself is out of reach on this reference data",
            {"candidates": candidates, "all_fp32": base},
        )


def _figures(judge: Judge, options: dict[str, list[str]], board: MixedSwitchboard) -> Figures:
    """The all-fp32 graph (which must pass on every batch: checked before any other is
    measured), then each GEMM alone in each of its lower types, on the ranking batches
    (gate/subset_first.py; the all-fp32 graph on them too, the sensitivities' base), each
    run from the latest checkpoint before its GEMM (common/checkpoints.py): every whole
    graph the search then weighs is judged on every batch."""
    ev = judge.evaluator
    whole = ev.figures({})
    started = time.perf_counter()
    out: Figures = {"": {"all": whole, "fp32": ev.figures({}, ranked=True)}}
    one_run = time.perf_counter() - started  # what each sensitivity run costs whole
    _check_base(judge, out, len(options))
    work = sum(len(o) - 1 for o in options.values())
    with (
        board.checkpointed(ev.order.ranking, expected_s=one_run * work),
        console.bar(total=work, desc="precision=auto sensitivity", unit="graph") as bar,
    ):
        for node, kinds in options.items():
            out[node] = {}
            for kind in kinds[:-1]:
                out[node][kind] = ev.figures({node: kind}, ranked=True)
                bar.update(1)
    return out


def _sensitivity(figures: Figures, criteria: accuracy.Criteria) -> Sensitivity:
    """The gate score each (GEMM, type) adds to the all-fp32 graph's, under this gate."""

    def gate_score(f: dict[str, dict[str, Any]]) -> float:
        return score(accuracy.check_gate(f, criteria.gate))

    base = gate_score(figures[""]["fp32"])
    return {
        node: {kind: round(max(0.0, gate_score(f) - base), 6) for kind, f in kinds.items()}
        for node, kinds in figures.items()
        if node
    }


def _bisect_lambda(judge: Judge, trade: Tradeoff, points: dict[str, Any]) -> dict[str, str]:
    """The cheapest assignment on the trade-off curve that passes."""
    cheapest = trade.at(0.0)
    points["lambda 0"] = cheapest
    if judge(cheapest)["passed"]:
        return cheapest
    lo, hi = LOG_LAMBDA
    best = trade.at(10**hi)
    points[f"lambda 1e{hi:g}"] = best
    if not judge(best)["passed"]:
        return {}  # nothing on the curve passes: all fp32, which does
    for _ in range(BY_NAME):
        mid = (lo + hi) / 2
        candidate = trade.at(10**mid)
        if judge(candidate)["passed"]:
            hi, best = mid, candidate
            if candidate not in points.values():
                points[f"lambda 1e{mid:.2f}"] = candidate
        else:
            lo = mid
    return best


def _polish(
    judge: Judge, trade: Tradeoff, best: dict[str, str], points: dict[str, Any]
) -> dict[str, str]:
    """Rounds of moves to the next cheaper allowed type, most bytes saved per sensitivity
    first, each keeping the longest prefix of its moves that still passes; the move that
    broke a round is not tried again, and a round that keeps none ends the polish. Rounds
    matter where sensitivities cannot tell GEMMs apart: a discrete metric (an OCR model's
    character error rate on a few lines) scores most GEMMs 0 alone, every lambda then takes
    all of them, the whole set fails, and only moves judged together find the ones that
    fit."""
    blocked: set[tuple[str, str]] = set()
    for _ in range(POLISH_ROUNDS):
        moves = _moves(trade, best, blocked)
        if not moves:
            break
        kept = _longest_passing(judge, best, moves)
        if not kept:  # each round that goes on keeps a move: the search stays quick
            break
        best = {**best, **{n: t for _, n, t in moves[:kept]}}
        points["polished"] = best
        if kept < len(moves):
            blocked.add(moves[kept][1:])
    return best


POLISH_ROUNDS = 2 * len(TYPES)  # each round one bisection: log2(GEMMs) judgements


def _moves(
    trade: Tradeoff, best: dict[str, str], blocked: set[tuple[str, str]]
) -> list[tuple[float, str, str]]:
    """(bytes saved per sensitivity added, node, type) for each GEMM's next cheaper type
    (by what it costs the objective: with code per layer, a narrower weight can cost more)."""
    moves = []
    for node, kind in ((n, best.get(n, "fp32")) for n in trade.options):
        here = trade.cost_of(node, kind)
        cheaper = sorted(
            (t for t in trade.allowed(node) if trade.cost_of(node, t) < here),
            key=lambda t: -trade.cost_of(node, t),
        )
        if cheaper and (node, cheaper[0]) not in blocked:
            to = cheaper[0]
            saved = here - trade.cost_of(node, to)
            cost = trade._s(node, to) - trade._s(node, kind)
            moves.append((saved / max(cost, 1e-9), node, to))
    moves.sort(key=lambda m: -m[0])
    return moves


def _longest_passing(
    judge: Judge, best: dict[str, str], moves: list[tuple[float, str, str]]
) -> int:
    lo, hi = 0, len(moves)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if judge({**best, **{n: t for _, n, t in moves[:mid]}})["passed"]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def resume(
    record: dict[str, Any], written: Callable[[dict[str, str]], Judgement]
) -> tuple[dict[str, str], Judgement]:
    """After the graph written with the search's assignment misses the gate as written
    (`written(assignment)` writes it and judges it), put GEMMs back in fp32, the most
    sensitive at their chosen type first, each count judged as written (1, 2, 4, ...
    then bisection: fallback/written.py's fewest_passing); the assignment that passes and
    its judgement, `record` updated (rows, counts, bytes, the written checks)."""
    row_of = {r["node"]: r for r in record["assignment"]}
    chosen = {n: r["type"] for n, r in row_of.items() if r["type"] != "fp32"}
    order = sorted(chosen, key=lambda n: -row_of[n]["sensitivity"].get(chosen[n], 0.0))
    checks: list[dict[str, Any]] = record.setdefault("written_checks", [])

    def widened(k: int) -> dict[str, str]:
        return {n: t for n, t in chosen.items() if n not in order[:k]}

    def judged_widened(k: int) -> Judgement:
        result = written(widened(k))
        checks.append({"fp32_added": k, "passed": result["gate_passed"]})
        return result

    got = fewest_passing(len(order), judged_widened)
    if got is None:
        raise SearchFailed(
            "precision=auto: the chosen graph misses the gate as written, and so does every "
            "graph with more of its GEMMs in fp32 up to all of them",
            record,
        )
    k, final = got
    best = widened(k)
    if checks[-1]["fp32_added"] != k:
        written(best)  # dest holds the passing graph, not the last one tried
    for n in order[:k]:
        row_of[n].update(
            type="fp32",
            weight_bytes=row_of[n]["fp32_weight_bytes"],
            why="put back in fp32: the written graph missed the gate with it lower",
        )
    record["weight_bytes"] = sum(r["weight_bytes"] for r in row_of.values())
    record["counts"] = {t: sum(1 for r in row_of.values() if r["type"] == t) for t in TYPES}
    return best, final
