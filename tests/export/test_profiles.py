import pytest

from pipeline.core.errors import PipelineError
from pipeline.export import profiles
from pipeline.export.onnx_model import TensorSpec
from tests.conftest import compose

TRANSFORMER_INPUTS = [
    TensorSpec("input_ids", "int64", ("batch", "seq")),
    TensorSpec("attention_mask", "int64", ("batch", "seq")),
]


def test_dims_apply_to_every_input_that_uses_them():
    [p] = profiles.resolve(compose("profile=dynamic").profile, TRANSFORMER_INPUTS)
    assert p["inputs"]["input_ids"] == {"min": [1, 8], "opt": [8, 32], "max": [32, 128]}
    assert p["inputs"]["attention_mask"] == p["inputs"]["input_ids"]


def test_fixed_dims_stay_fixed():
    [p] = profiles.resolve(
        compose().profile, [TensorSpec("images", "float32", ("batch", 3, 32, 32))]
    )
    assert p["inputs"]["images"]["max"] == [32, 3, 32, 32]


def test_two_profiles():
    resolved = profiles.resolve(compose("profile=two_profiles").profile, TRANSFORMER_INPUTS)
    assert [p["name"] for p in resolved] == ["latency", "throughput"]


def test_profile_naming_unknown_input_fails():
    cfg = compose("+profile.profiles.0.shapes.pixels={min:[1,3],opt:[2,3],max:[4,3]}")
    with pytest.raises(PipelineError, match="names input 'pixels' which the model does not have"):
        profiles.resolve(cfg.profile, [TensorSpec("images", "float32", ("batch", 3))])


def test_dynamic_dim_without_range_fails():
    from pipeline.core import config

    cfg = config.validate({"profile": {"profiles": [{"name": "p", "dims": {"batch": [1, 2, 4]}}]}})
    with pytest.raises(PipelineError, match="'seq'.*no range"):
        profiles.resolve(cfg.profile, TRANSFORMER_INPUTS)


def test_explicit_shape_must_respect_fixed_dims():
    cfg = compose("+profile.profiles.0.shapes.images={min:[1,4],opt:[2,4],max:[4,4]}")
    with pytest.raises(PipelineError, match="fixed at 3"):
        profiles.resolve(cfg.profile, [TensorSpec("images", "float32", ("batch", 3))])


def test_contains():
    [p] = profiles.resolve(compose().profile, TRANSFORMER_INPUTS)
    assert profiles.contains(p, {"input_ids": [4, 64]})
    assert not profiles.contains(p, {"input_ids": [64, 64]})
