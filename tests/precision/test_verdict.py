"""The verdict on samples a search never saw: how reference batches split, and the gate a
search judges by."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.flow import calibrate_stage
from pipeline.precision.gate import accuracy, evaluator, tasks, verdict
from tests.conftest import compose

AXES = {"x": 0}


def batches(n: int, size: int = 1) -> list[accuracy.ReferenceBatch]:
    """n batches whose sample i holds the value i, so a split can be read back."""
    out = []
    for b in range(n):
        ids = np.arange(b * size, (b + 1) * size, dtype=np.float32)
        out.append(({"x": ids[:, None].repeat(3, 1)}, {"y": ids[:, None] * 2}))
    return out


def ids(part: list[accuracy.ReferenceBatch]) -> list[int]:
    return [int(v) for p in part for v in p[0]["x"][:, 0]]


def test_batches_split_whole_spread_over_the_set_and_never_overlap():
    parts = verdict.split(batches(8), 0.25, AXES)
    assert ids(parts.verdict) == [2, 6]
    assert sorted(ids(parts.search) + ids(parts.verdict)) == list(range(8))
    assert not set(ids(parts.search)) & set(ids(parts.verdict))
    assert parts.info["search_samples"] == 6 and parts.info["verdict_samples"] == 2
    assert "shows little" in parts.info["note"]


def test_one_batch_splits_by_sample():
    parts = verdict.split(batches(1, size=12), 0.25, AXES)
    assert len(ids(parts.verdict)) == 3 and len(ids(parts.search)) == 9
    assert sorted(ids(parts.search) + ids(parts.verdict)) == list(range(12))
    # each part's outputs are its own samples' outputs
    for inputs, outputs in parts.verdict + parts.search:
        assert np.array_equal(outputs["y"][:, 0], inputs["x"][:, 0] * 2)


def test_enough_held_out_samples_need_no_note():
    parts = verdict.split(batches(4, size=8), 0.25, AXES)
    assert parts.info["verdict_samples"] == 8
    assert "note" not in parts.info


def test_a_decoders_steps_stay_with_their_prefill():
    """A prefill (cache as long as its logits) starts a group; the decode steps after it
    (cache longer) belong to it, so a prompt is judged in one part only."""

    def step(prompt: int, seq: int, past: int) -> accuracy.ReferenceBatch:
        logits = np.full((1, seq, 5), prompt, np.float32)
        present = np.zeros((1, 2, past + seq, 4), np.float32)
        return {"x": np.full((1, 3), prompt, np.float32)}, {
            tasks.DECODER_LOGITS: logits,
            "present.0.key": present,
        }

    pairs = [s for p in range(4) for s in (step(p, 6, 0), step(p, 1, 6), step(p, 1, 7))]
    parts = verdict.split(pairs, 0.25, AXES)
    assert len(parts.verdict) == 3 and len(parts.search) == 9
    assert len({int(p[0]["x"][0, 0]) for p in parts.verdict}) == 1
    assert not {int(p[0]["x"][0, 0]) for p in parts.verdict} & {
        int(p[0]["x"][0, 0]) for p in parts.search
    }


def test_no_holdout_rereads_the_search_samples_and_says_so():
    parts = verdict.split(batches(4), 0.0, AXES)
    assert parts.search == parts.verdict
    assert "re-reads the search's 4 samples" in parts.info["note"]
    assert "precision.holdout is 0" in parts.info["note"]
    # the calibrate table says what the note says, not "samples the search never judged"
    assert calibrate_stage.holdout_line(parts.info) == parts.info["note"]
    held = verdict.split(batches(8), 0.25, AXES).info
    assert calibrate_stage.holdout_line(held).startswith("verdict on 2 samples the search never")


def test_the_search_judges_by_a_gate_inside_the_verdicts():
    gate = compose("precision=int8").precision.gate
    criteria = accuracy.Criteria(gate, tasks.OutputTasks("embedding"))
    tight = verdict.tightened(criteria, 0.2).gate
    assert tight.min_cosine == pytest.approx(1 - (1 - gate.min_cosine) * 0.8)
    assert tight.max_rel_error == pytest.approx(gate.max_rel_error * 0.8)
    assert tight.max_mean_rel_error is None
    # in the search's score, the tightened threshold is 1 - margin of the gate's
    ref = [{"y": np.ones((4, 8))}]
    got = [{"y": np.ones((4, 8)) + np.linspace(0, 1, 8) * 0.05}]
    loose = evaluator.score(accuracy.check_gate(criteria.judge(ref, got)[0], gate))
    strict = evaluator.score(accuracy.check_gate(criteria.judge(ref, got)[0], tight))
    assert strict == pytest.approx(loose / 0.8, rel=1e-6)


def test_a_verdict_failure_after_a_passing_search_names_both_and_the_ways_out():
    summary = {
        "holdout": {"search_samples": 24, "verdict_samples": 8, "margin": 0.2},
        "search_judgement": {"gate_passed": True},
    }
    hint = verdict.failure_hint(summary)
    assert "8 samples the search never judged" in hint
    assert "precision.search_margin" in hint
    assert verdict.failure_hint({**summary, "search_judgement": {"gate_passed": False}}) == ""
