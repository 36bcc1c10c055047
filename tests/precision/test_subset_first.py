"""Judging a search's graph on its hardest batches first: the verdict is the whole set's,
and a graph that fails on a worst case there costs only those batches."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.precision.gate import accuracy, evaluator, subset_first, tasks
from tests.conftest import compose

RNG = np.random.default_rng(3)


def pairs(n: int = 8) -> list[accuracy.ReferenceBatch]:
    # batch 5 holds the largest reference row: an anchor of every subset
    out = []
    for i in range(n):
        y = RNG.standard_normal((4, 16)) * (5.0 if i == 5 else 1.0)
        out.append(({"x": np.full((4, 1), float(i))}, {"y": y}))
    return out


def criteria(task: str, *overrides: str) -> accuracy.Criteria:
    gate = compose("precision=int8", *overrides).precision.gate
    return accuracy.Criteria(gate, tasks.OutputTasks(task))


def noisy(refs: list[accuracy.ReferenceBatch], noise: dict[int, float]):
    """outputs(choice, which): batch i of choice c off by noise[c][i] (default 0)."""
    ran: list[int] = []

    def outputs(choice, which):
        idx = range(len(refs)) if which is None else which
        ran.extend(idx)
        return [{"y": refs[i][1]["y"] * (1 + choice.get(i, 0.0))} for i in idx]

    return outputs, ran


@pytest.mark.parametrize(
    "metric,task,decides",
    [
        ("rel_error", "regression", True),
        ("max_abs_error", "dense", True),
        ("cosine", "embedding", True),
        ("cosine", "dense", False),
        ("top1_agreement", "classification", False),
        ("mean_rel_error", "dense", False),
    ],
)
def test_only_worst_case_figures_decide_on_a_subset(metric, task, decides):
    failing = {"passed": False, "enabled": True, "metric": metric, "task": task}
    assert subset_first.decisive([failing]) is decides


def test_every_verdict_is_the_whole_sets_and_failures_cost_a_subset():
    refs = pairs()
    by = criteria("regression", "precision.gate.max_abs_error=null")
    outputs, ran = noisy(refs, {})
    ev = evaluator.Evaluator(outputs, refs, by)
    # {3: 0.3} fails on batch 3 alone, outside the first subset: judged on every batch, it
    # puts batch 3 first, and {3: 0.25} after it fails on the subset
    choices = [{}, {5: 0.001}, {3: 0.3}, {3: 0.25}, {0: 0.04, 7: 0.06}, {1: 0.01}, {5: 0.2}]
    for choice in choices:
        ran.clear()
        got = ev(choice)
        cost = len(ran)
        full = evaluator.judged(by.judge([p[1] for p in refs], outputs(choice, None))[1])
        assert got["passed"] == full["passed"], choice
        if "on_batches" in got:
            assert not got["passed"] and cost == ev.order.first < len(refs)
    assert ev.decided_on_subset >= 2
    # the anchor, then the batch the last graph judged on every batch failed worst on
    assert ev.order.head() == [5, 7]


def test_a_mean_figure_is_judged_on_every_batch():
    refs = pairs()
    by = criteria("classification")
    outputs, ran = noisy(refs, {})
    ev = evaluator.Evaluator(outputs, refs, by)
    ran.clear()
    flipped = {i: -2.0 for i in range(8)}  # every argmax moves: top-1 fails on every batch
    assert not ev(flipped)["passed"]
    assert sorted(ran) == list(range(8))
