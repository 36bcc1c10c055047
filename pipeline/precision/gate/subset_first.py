"""Judge a search's graph on its hardest batches first, and on the rest only where they
could change the verdict.

A search judges tens to hundreds of graphs, each over every batch it holds, and about half
of them fail. Where every failing figure is a worst case (the worst sample's relative
error, the largest absolute error, the worst row's cosine, a NaN), no further batch can
make it pass: the figure over all batches is at least as bad as over some. So each graph
first runs on a few batches (the hardest ones so far, with the batches that hold each
output's largest reference row, so the floors those figures measure against are the
whole set's), and the rest run only if it passes there or fails on a figure that more
batches could improve (a mean, a top-1 share, a perplexity, the user's metric). The
verdict of every graph is the one the whole set gives."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pipeline.core import gate
from pipeline.core.gate import GateResult
from pipeline.precision.gate import accuracy, tasks

# The metrics that take the worst over samples or rows: a failure on some batches is one on all.
WORST_OF = frozenset({"max_abs_error", "rel_error", "finite"})


def decisive(results: list[GateResult]) -> bool:
    """Whether a failing judgement on some batches fails on every superset of them."""
    failing = gate.failures(results)
    return bool(failing) and all(
        r.get("metric") in WORST_OF
        or (r.get("metric") == "cosine" and r.get("task") in tasks.ROW_COSINE)
        for r in failing
    )


class Batches:
    """The order a search's batches are judged in: the anchors (each output's largest
    reference row) and the hardest so far first; `first` of them make the subset. And the
    fixed batches sensitivities are ranked on (`ranking`): the anchors and batches spread
    over the set, as many as the subset holds, the same for every graph ranked."""

    def __init__(self, pairs: Sequence[accuracy.ReferenceBatch], first: int) -> None:
        self.pairs = list(pairs)
        self.anchors = _anchors(self.pairs)
        self.first = max(first, len(self.anchors))
        self.order = [*self.anchors, *(i for i in range(len(pairs)) if i not in self.anchors)]
        n = len(self.pairs)
        spread = {min(n - 1, int((j + 0.5) * n / self.first)) for j in range(self.first)}
        self.ranking = sorted(set(self.anchors) | spread) if self.useful else list(range(n))

    @property
    def useful(self) -> bool:
        return self.first < len(self.pairs)

    def head(self) -> list[int]:
        return self.order[: self.first]

    def tail(self) -> list[int]:
        return self.order[self.first :]

    def learn(
        self,
        per_batch: Sequence[dict[str, dict[str, Any]]],
        criteria: accuracy.Criteria,
        score: Callable[..., float],
    ) -> None:
        """After a graph failed on every batch (`per_batch`: its figures on each alone): the
        batches it failed worst on go first (after the anchors), as the next graphs likely
        fail where this one did."""
        hardness = {
            i: score(accuracy.check_gate(figures, criteria.gate))
            for i, figures in enumerate(per_batch)
        }
        rest = sorted((i for i in hardness if i not in self.anchors), key=lambda i: -hardness[i])
        self.order = [*self.anchors, *rest]


def _anchors(pairs: list[accuracy.ReferenceBatch]) -> list[int]:
    """Each output's batch holding its largest reference row (norm), in batch order."""
    best: dict[str, tuple[float, int]] = {}
    for i, (_, outputs) in enumerate(pairs):
        for name, value in tasks.split_labels(outputs)[0].items():
            a = np.asarray(value, np.float64)
            rows = a.reshape(len(a), -1) if a.ndim >= 2 else a.reshape(1, -1)
            norm = float(np.linalg.norm(rows, axis=1).max()) if rows.size else 0.0
            if name not in best or norm > best[name][0]:
                best[name] = (norm, i)
    return sorted({i for _, i in best.values()})


def judged_in_order(
    figures_on: Callable[[list[int]], dict[str, dict[str, Any]]],
    batches: Batches,
    criteria: accuracy.Criteria,
) -> tuple[bool, list[GateResult]]:
    """(whether the subset decided, the gate results): of the subset where it failed
    decisively, else of every batch, in batch order. `figures_on(which)`: a graph's figures
    on those batches."""
    results = accuracy.check_gate(figures_on(batches.head()), criteria.gate)
    if not accuracy.passed(results) and decisive(results):
        return True, results
    every = figures_on(list(range(len(batches.pairs))))
    return False, accuracy.check_gate(every, criteria.gate)
