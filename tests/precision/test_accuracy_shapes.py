"""The accuracy figures over outputs whose shape is not one per-row width: outputs that
follow the input's values (ConstantOfShape, NonZero) differ from batch to batch, and
scalar outputs have no rows."""

import numpy as np
import pytest

from pipeline.core.errors import PipelineError
from pipeline.precision.gate import accuracy


def test_outputs_of_other_shapes_per_batch_get_the_element_wise_figures():
    ref = [{"y": np.ones((2, 52), np.float32)}, {"y": np.ones((2, 60), np.float32)}]
    got = [{"y": np.ones((2, 52), np.float32)}, {"y": np.full((2, 60), 1.5, np.float32)}]
    figures = accuracy.compare(ref, got, "classification")["y"]
    assert figures["max_abs_error"] == pytest.approx(0.5)
    assert figures["mean_rel_error"] == pytest.approx(0.5 * 120 / 224)
    assert "top1_agreement" not in figures  # rows of different widths have no common argmax


def test_scalar_outputs_and_rows_of_one_width():
    ref = [{"s": np.float32(2.0), "y": np.eye(3, dtype=np.float32)}] * 2
    figures = accuracy.compare(ref, ref, "classification")
    assert figures["s"]["max_abs_error"] == 0 and figures["s"]["cosine"] == pytest.approx(1)
    assert figures["y"]["top1_agreement"] == 1.0


def test_a_batch_of_another_shape_than_its_reference_is_one_line():
    ref = [{"y": np.ones((2, 4), np.float32)}]
    with pytest.raises(PipelineError, match=r"output 'y' has shape \(2, 5\) in batch 0"):
        accuracy.compare(ref, [{"y": np.ones((2, 5), np.float32)}], "regression")


def test_empty_outputs_compare_as_equal():
    ref = [{"y": np.zeros((0,), np.float32)}, {"y": np.arange(3, dtype=np.float32)}]
    figures = accuracy.compare(ref, ref, "regression")["y"]
    assert figures["max_abs_error"] == 0 and figures["cosine"] == pytest.approx(1)
    empty = [{"y": np.zeros((0, 4), np.float32)}]
    assert accuracy.compare(empty, empty, "classification")["y"]["max_abs_error"] == 0


def _sequences(batches: int, rows: int = 64, width: int = 4096):
    rng = np.random.default_rng(0)
    ref = [{"y": rng.standard_normal((2, rows, width), dtype=np.float32)} for _ in range(batches)]
    got = [
        {"y": b["y"] + np.float32(0.01) * rng.standard_normal(b["y"].shape, np.float32)}
        for b in ref
    ]
    return ref, got


def test_figures_over_batches_are_those_of_the_outputs_taken_whole():
    ref, got = _sequences(3, rows=5, width=7)
    r = np.concatenate([b["y"] for b in ref]).astype(np.float64)
    g = np.concatenate([b["y"] for b in got]).astype(np.float64)
    rows_r, rows_g = r.reshape(-1, 7), g.reshape(-1, 7)
    row_cos = (
        (rows_r * rows_g).sum(1) / np.linalg.norm(rows_r, axis=1) / np.linalg.norm(rows_g, axis=1)
    )
    samples = np.linalg.norm((g - r).reshape(6, -1), axis=1) / np.linalg.norm(
        r.reshape(6, -1), axis=1
    )
    figures = accuracy.compare(ref, got, "sequence")["y"]
    assert figures["max_abs_error"] == pytest.approx(np.abs(g - r).max())
    assert figures["mean_rel_error"] == pytest.approx((np.abs(g - r) / np.abs(r)).mean())
    assert figures["cosine"] == pytest.approx(row_cos.min()) and figures["rows"] == 30
    assert figures["cosine_mean"] == pytest.approx(row_cos.mean())
    assert figures["rel_error"] == pytest.approx(samples.max())


def test_outputs_are_judged_a_batch_at_a_time_never_stacked():
    """A decoder's logits over a search's prompts are hundreds of MB, twice that widened
    to float64: the figures hold about one batch's worth at a time."""
    import tracemalloc

    ref, got = _sequences(32, rows=32)  # 32 batches of 1 MiB each
    whole = sum(b["y"].nbytes for b in got)
    tracemalloc.start()
    try:
        accuracy.compare(ref, got, "sequence")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # stacked, the reference and the candidate in float64 held 4x these bytes, and each
    # figure made arrays of that size
    assert peak < whole / 2, f"{peak / whole:.1f}x the candidate outputs' bytes"
