"""Sample layouts for inputs that are not a plain [batch, ...] stack: a rank-0 sample rate,
recurrent state [layers, batch, hidden], a batch dim without a name."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.core.errors import PipelineError
from pipeline.graph.onnx_model import TensorSpec
from pipeline.inputs import samples
from tests.conftest import compose

VAD_INPUTS = [
    TensorSpec("x", "float32", ("batch", 512)),
    TensorSpec("sr", "int64", ()),
    TensorSpec("h", "float32", (2, "batch", 64)),
]


def test_state_counts_samples_on_the_batch_dims_axis_and_a_scalar_is_shared():
    cfg = compose("model=onnx_file", "profile.shapes={x: [1x512, 4x512, 8x512]}")
    layout = samples.layout(cfg.model, cfg.profile, VAD_INPUTS[:1] + VAD_INPUTS[1:])
    assert layout.axes == {"x": 0, "sr": None, "h": 1}
    # h's batch comes from the profile's named dim, once, for both inputs
    assert layout.shapes == {"x": [4, 512], "sr": [], "h": [2, 4, 64]}
    assert layout.batch == 4
    assert layout.at_batch(1) == {"x": [1, 512], "sr": [], "h": [2, 1, 64]}


def test_an_unnamed_batch_counts_on_the_first_dynamic_axis():
    specs = [TensorSpec("x", "float32", (None, 3, 48, 192)), TensorSpec("c", "float32", (1, None))]
    assert samples.sample_axes(compose().model, specs) == {"x": 0, "c": 1}


def test_model_sample_axis_wins_and_is_checked():
    specs = VAD_INPUTS
    cfg = compose("model.sample_axis={h: 0}")
    assert samples.sample_axes(cfg.model, specs)["h"] == 0
    with pytest.raises(PipelineError, match="model.sample_axis names 'y'"):
        samples.sample_axes(compose("model.sample_axis={y: 0}").model, specs)
    with pytest.raises(PipelineError, match="has rank 3"):
        samples.sample_axes(compose("model.sample_axis={h: 3}").model, specs)


def test_inputs_that_disagree_on_the_sample_count_are_one_line_naming_sample_axis():
    specs = [TensorSpec("x", "float32", ("b", 8)), TensorSpec("h", "float32", (2, "b2", 8))]
    cfg = compose("profile.shapes={x: 4x8, h: 2x3x8}")
    with pytest.raises(
        PipelineError, match=r"disagree on the number of samples.*model.sample_axis"
    ):
        samples.layout(cfg.model, cfg.profile, specs)


def test_split_take_and_concat_follow_each_inputs_axis():
    axes = {"x": 0, "sr": None, "h": 1}
    batch = {
        "x": np.arange(6 * 2).reshape(6, 2),
        "sr": np.array(16000),
        "h": np.arange(2 * 6 * 3).reshape(2, 6, 3),
    }
    parts = samples.split(batch, axes, 5, 2)
    assert [samples.count(p, axes) for p in parts] == [2, 2, 1]
    assert parts[2]["h"].shape == (2, 1, 3) and parts[2]["sr"] == 16000
    joined = samples.concat(parts, axes)
    assert np.array_equal(joined["h"], batch["h"][:, :5]) and joined["sr"].shape == ()
    one = samples.row(batch, axes, 3)
    assert np.array_equal(one["h"], batch["h"][:, 3]) and one["sr"] == 16000
