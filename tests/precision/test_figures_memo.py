"""A search run again under another gate (a new precision.search_margin, a threshold) reads
the figures the last one measured and runs ONNX Runtime only for graphs it has not judged;
its verdicts are those a fresh search under the new gate gives."""

from __future__ import annotations

import numpy as np

from pipeline.precision.common.figures_memo import FiguresMemo
from pipeline.precision.gate import evaluator
from pipeline.store import VerifiedStore
from tests.precision.test_subset_first import criteria, noisy

KEY = "cd" * 32
CHOICES = [{}, {5: 0.001}, {3: 0.3}, {3: 0.25}, {0: 0.04, 7: 0.06}, {1: 0.01}, {5: 0.2}]


def _pairs() -> list:
    """The same reference data for every search of a test (the memo's key holds its hash)."""
    rng = np.random.default_rng(5)
    ys = [rng.standard_normal((4, 16)) * (5.0 if i == 5 else 1.0) for i in range(8)]
    return [({"x": np.full((4, 1), float(i))}, {"y": y}) for i, y in enumerate(ys)]


def _search(tmp_path, *overrides: str, store: bool = True):
    refs = _pairs()
    by = criteria("regression", "precision.gate.max_abs_error=null", *overrides)
    outputs, ran = noisy(refs, {})
    memo = FiguresMemo(VerifiedStore(tmp_path, required=("figures.json",)) if store else None, KEY)
    ev = evaluator.Evaluator(outputs, refs, by, memo)
    verdicts = [ev(c)["passed"] for c in CHOICES] + [ev(c, ranked=True)["score"] for c in CHOICES]
    memo.save()
    return verdicts, len(ran), memo


def test_a_search_under_another_gate_measures_only_what_is_new(tmp_path):
    first, ran_first, _ = _search(tmp_path)
    assert ran_first > 0
    same, ran_again, memo = _search(tmp_path)
    assert same == first and ran_again == 0 and memo.reused > 0
    # a looser relative error: the verdicts of a search that measured everything afresh,
    # from figures measured under the old gate
    loose, ran_loose, _ = _search(tmp_path, "precision.gate.max_rel_error=0.2")
    fresh, _, _ = _search(tmp_path / "elsewhere", "precision.gate.max_rel_error=0.2", store=False)
    assert loose == fresh and loose != first
    assert ran_loose < ran_first  # the subset order follows the new gate: a few are new


def test_a_damaged_memo_is_measured_again(tmp_path):
    first, ran_first, memo = _search(tmp_path)
    (memo.store.entries / KEY / "figures.json").write_text("{}")
    again, ran_again, _ = _search(tmp_path)
    assert again == first and ran_again == ran_first
