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
