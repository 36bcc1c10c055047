"""pipeline.inputs.sizes against the arrays the real code then makes."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.graph.onnx_model import TensorSpec
from pipeline.inputs import sample_data, sizes


@pytest.mark.parametrize(
    "factory, dims",
    [
        ("pipeline.zoo.cnn_classifier", {"batch": 5}),
        ("pipeline.zoo.transformer_encoder", {"batch": 3, "seq": 37}),
        ("pipeline.zoo.outlier_bert", {"batch": 2, "seq": 19}),
    ],
)
def test_a_factory_is_sized_from_tiny_calls(factory, dims):
    module = importlib.import_module(factory)
    made = module.sample_inputs(dict(dims), np.random.default_rng(1))
    assert sizes.factory_bytes(module, dims) == sum(a.nbytes for a in made.values())


def test_specs_are_sized_exactly_with_the_draw_before_the_cast():
    specs = [
        TensorSpec("x", "float32", ("batch", 3, "seq")),
        TensorSpec("ids", "int32", ("batch", "seq")),
    ]
    shapes = {"x": [4, 3, 10], "ids": [4, 10]}
    # a model without a factory: the tool draws its inputs from the specs
    model_cfg = SimpleNamespace(factory=None, input_ranges={}, int_low=0, int_high=100)
    made = sample_data.sample_inputs(model_cfg, specs, shapes, np.random.default_rng(0))
    kept = sum(a.nbytes for a in made.values())
    assert sizes.spec_bytes(specs, shapes) == kept == 4 * 3 * 10 * 4 + 4 * 10 * 4
    # numpy draws x as float64 first: 120 values of 8 bytes exist beside the result
    assert sizes.spec_bytes(specs, shapes, drawn=True) == kept + 120 * 8
    # an output sized by the inputs' named dims; one with a dim no input has counts nothing
    outputs = [TensorSpec("y", "float32", ("batch", "seq")), TensorSpec("z", "float32", ("n",))]
    assert sizes.output_shapes(outputs, {"batch": 4, "seq": 10}) == {"y": [4, 10]}


def test_the_setting_behind_the_largest_input_is_named():
    specs = [TensorSpec("x", "float32", ("batch", 3, "seq")), TensorSpec("m", "int64", (2,))]
    shapes = {"x": [9, 3, 128], "m": [2]}
    given = SimpleNamespace(sample_dims={"batch": 9})
    assert sizes.largest_key(given, specs, shapes) == "model.sample_dims.batch=9"
    assert sizes.largest_key(SimpleNamespace(sample_dims={}), specs, shapes) == (
        "profile.shapes.x (opt 9x3x128)"
    )


def test_an_onnx_file_at_a_batch_of_a_billion_is_refused_by_the_export_stage(tmp_path):
    from pipeline.core.errors import PipelineError
    from pipeline.core.layout import Layout
    from pipeline.flow import stages
    from tests.conftest import compose

    cfg = compose("model=onnx_file", "model.sample_dims.batch=1000000000")
    layout = Layout(tmp_path)
    with pytest.raises(PipelineError) as e:
        stages.export(cfg, layout)
    # tiny_mlp: features [batch, 16] float32 drawn as float64, scores [batch, 5] float32
    need = 10**9 * (16 * 4 + 5 * 4) + 10**9 * 16 * 8
    text = str(e.value)
    assert text.startswith("model.sample_dims.batch=1000000000:") and "\n" not in text
    assert f"needs {need:,} bytes" in text
    assert not layout.export_dir.exists() and not list(layout.export_dir.parent.glob(".export*"))
