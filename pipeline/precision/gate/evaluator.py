"""How both searches judge a graph: its gate score (1.0 at the threshold) and its verdict,
on the hardest batches first (subset_first.py), from figures an earlier search may have
measured already (common/figures_memo.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, Required, TypedDict, TypeVar

import numpy as np

from pipeline.core import gate
from pipeline.core.gate import GateResult
from pipeline.precision.common import search_progress
from pipeline.precision.common.figures_memo import Figures, FiguresMemo, memo_id
from pipeline.precision.gate import accuracy, subset_first

# A graph is judged on about a quarter of the batches first (gate/subset_first.py).
SUBSET_SHARE = 4
# What a search varies: the nodes it keeps out of the low type, or a type per node.
Choice = TypeVar("Choice", bound=Mapping[str, str] | Iterable[str])
Outputs = list[dict[str, np.ndarray]]


class SearchJudgement(TypedDict, total=False):
    """A graph's gate results in the search's terms (a step of the search's record)."""

    score: Required[float]  # the worst gated figure against its threshold: 1.0 passes
    passed: Required[bool]
    metrics: Required[dict[str, dict[str, Any]]]  # subject -> gated metric -> its figure
    failing: Required[list[str]]  # a line per failed check
    on_batches: int  # judged on the first this many batches only: the subset decided


class Tally(TypedDict):
    """What a search's record says of its judging, beside how many graphs it judged."""

    ranked_on_batches: int  # units are ranked on these, each bisection step judged on all
    batches: int
    decided_on_subset: int  # graphs whose verdict the first batches settled
    figures_reused: int  # judgements from figures an earlier search measured (figures_memo)


def score(results: list[GateResult]) -> float:
    """1.0 at the threshold, below passes: max over gated metrics of value/threshold
    (upper bounds) or (1 - value)/(1 - threshold) (lower bounds such as cosine)."""
    worst = 0.0
    for r in results:
        if not r["enabled"]:
            continue
        value, threshold = r["value"], r["threshold"]
        if r["direction"] == "max":
            s = value / threshold if threshold > 0 else (0.0 if value <= threshold else math.inf)
        elif r["direction"] == "min":
            s = (
                (1 - value) / (1 - threshold)
                if threshold < 1
                else (0.0 if value >= threshold else math.inf)
            )
        else:
            s = 0.0 if r["passed"] else math.inf
        worst = max(worst, s)
    return worst


def judged(results: list[GateResult]) -> SearchJudgement:
    """A graph's gate results in the search's terms: score, gated metrics, failures."""
    gated: dict[str, dict[str, Any]] = {}
    for r in results:
        gated.setdefault(str(r["subject"]), {})[r.get("metric", r["gate"])] = r["value"]
    return {
        "score": round(score(results), 6),
        "passed": accuracy.passed(results),
        "metrics": gated,
        "failing": [gate.describe(r) for r in gate.failures(results)],
    }


class Evaluator(Generic[Choice]):
    """Judges a choice against the gate on the search's batches: the hardest few first, the
    rest only where they could change the verdict (gate/subset_first.py), so a failing graph
    mostly costs a few. Figures come from `memo` where a search measured them before."""

    def __init__(
        self,
        outputs: Callable[[Choice, list[int] | None], Outputs],
        pairs: list[accuracy.ReferenceBatch],
        criteria: accuracy.Criteria,
        memo: FiguresMemo | None = None,
    ) -> None:
        self.outputs, self.pairs, self.criteria = outputs, pairs, criteria
        self.memo = memo if memo is not None else FiguresMemo()
        self.order = subset_first.Batches(pairs, math.ceil(len(pairs) / SUBSET_SHARE))
        self.runs = self.decided_on_subset = 0
        self.progress: search_progress.Progress[Choice] | None = None

    def __call__(self, choice: Choice, ranked: bool = False) -> SearchJudgement:
        """The choice's judgement; `ranked`: its score on the ranking batches (the same
        for every graph ranked: a search orders units by it, then confirms on all)."""
        held: dict[int, dict[str, np.ndarray]] = {}

        def figures_on(which: list[int]) -> Figures:
            return self._figures_on(choice, which, held)

        self.runs += 1
        decided = False
        if ranked or not self.order.useful:
            which = self.order.ranking if ranked else self._every()
            results = accuracy.check_gate(figures_on(which), self.criteria.gate)
        else:
            decided, results = subset_first.judged_in_order(figures_on, self.order, self.criteria)
            if decided:
                self.decided_on_subset += 1
            elif not accuracy.passed(results):
                self.order.learn([figures_on([i]) for i in self._every()], self.criteria, score)
        result = judged(results)
        if decided:  # its figures are the subset's: say so
            result["on_batches"] = self.order.first
        if self.progress is not None:
            self.progress.judged(choice, result)
        return result

    def figures(self, choice: Choice, ranked: bool = False) -> Figures:
        """The accuracy figures of a choice, which any gate can judge later: on every
        batch, or (`ranked`) on the ranking batches."""
        self.runs += 1
        return self._figures_on(choice, self.order.ranking if ranked else self._every(), {})

    def tally(self) -> Tally:
        return {
            "ranked_on_batches": len(self.order.ranking),
            "batches": len(self.pairs),
            "decided_on_subset": self.decided_on_subset,
            "figures_reused": self.memo.reused,
        }

    def _every(self) -> list[int]:
        return list(range(len(self.pairs)))

    def _figures_on(
        self, choice: Choice, which: list[int], held: dict[int, dict[str, np.ndarray]]
    ) -> Figures:
        """The figures on the batches `which`, in that order: remembered, or from the
        outputs of the batches not `held` yet (one ONNX Runtime pass over those)."""
        ident = memo_id(choice, which)
        known = self.memo.get(ident)
        if known is not None:
            return known
        missing = [i for i in which if i not in held]
        if missing:
            held.update(zip(missing, self.outputs(choice, missing)))
        figures, _ = self.criteria.judge(
            [self.pairs[i][1] for i in which], [held[i] for i in which]
        )
        self.memo.put(ident, figures)
        return figures
