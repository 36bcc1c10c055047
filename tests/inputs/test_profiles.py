import re

import pytest

from pipeline.core import config
from pipeline.core.errors import PipelineError
from pipeline.graph.onnx_model import TensorSpec
from pipeline.inputs import profiles
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
    cfg = config.validate({"profile": {"profiles": [{"name": "p", "dims": {"batch": [1, 2, 4]}}]}})
    with pytest.raises(PipelineError, match="no range for 'seq'"):
        profiles.resolve(cfg.profile, TRANSFORMER_INPUTS)


# Inputs as real exporters name their dims: paddle2onnx's dotted names, tf2onnx's `unk__N`,
# a literal `?`, and none at all (-1).
WILD_INPUTS = [
    TensorSpec("x", "float32", ("p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1", "?")),
    TensorSpec("h", "float32", (2, None, 128)),
    TensorSpec("ids", "int64", ("unk__214",)),
    TensorSpec("sr", "int64", ()),
]


def test_every_missing_shape_is_listed_once_with_an_override_that_pastes():
    cfg = compose()
    with pytest.raises(PipelineError) as e:
        profiles.resolve(cfg.profile, WILD_INPUTS)
    line = str(e.value)
    assert "\n" not in line and "3 dynamic input(s)" in line
    for name in ("'x'", "'h'", "'ids'"):
        assert name in line
    assert "'sr'" not in line  # rank 0 needs no shape
    override = re.search(r"-S '(profile\.shapes=.*?)'", line).group(1)
    [p] = profiles.resolve(compose(override).profile, WILD_INPUTS)
    assert p["inputs"]["x"]["opt"] == [1, 3, 256, 256] and p["inputs"]["sr"]["opt"] == []
    assert p["inputs"]["h"]["max"] == [2, 8, 128]


@pytest.mark.parametrize(
    "override",
    [
        "profile.shapes={x: [1x3x32x32, 2x3x64x48, 4x3x128x96]}",
        "profile.shapes='x:2x3x64x48'",  # trtexec's --shapes form: min = opt = max
        "profile.shapes={x: {min: 1x3x32x32, opt: [2, 3, 64, 48], max: 4x3x128x96}}",
    ],
)
def test_shapes_are_said_per_input_in_any_form(override):
    specs = WILD_INPUTS[:1]
    [p] = profiles.resolve(compose(override).profile, specs)
    assert p["inputs"]["x"]["opt"] == [2, 3, 64, 48]


def test_dotted_dim_names_work_as_profile_dims_and_sample_dims():
    cfg = compose(
        "+profile.profiles.0.dims.p2o.DynamicDimension.0=[1,2,4]",
        "+profile.profiles.0.dims.p2o.DynamicDimension.1=[16,32,64]",
        "model.sample_dims.p2o.DynamicDimension.1=48",
    )
    assert "p2o.DynamicDimension.0" in cfg.profile.profiles[0].dims
    assert cfg.model.sample_dims == {"p2o.DynamicDimension.1": 48}
    # `?` cannot be written in a command-line key; in a config file it is a name like any
    tree = config.to_dict(cfg)
    tree["profile"]["profiles"][0]["dims"]["?"] = [8, 8, 8]
    [p] = profiles.resolve(config.validate(tree).profile, WILD_INPUTS[:1])
    assert p["inputs"]["x"]["opt"] == [2, 3, 32, 8]


def test_a_shape_of_the_wrong_rank_is_one_line():
    with pytest.raises(PipelineError, match="rank 2 but the model's input has rank 4"):
        profiles.resolve(compose("profile.shapes={x: 1x3}").profile, WILD_INPUTS[:1])
    with pytest.raises(PipelineError, match="not a shape"):
        compose("profile.shapes={x: 1xyx3}")


def test_explicit_shape_must_respect_fixed_dims():
    cfg = compose("+profile.profiles.0.shapes.images={min:[1,4],opt:[2,4],max:[4,4]}")
    with pytest.raises(PipelineError, match="fixed at 3"):
        profiles.resolve(cfg.profile, [TensorSpec("images", "float32", ("batch", 3))])


def test_contains():
    [p] = profiles.resolve(compose().profile, TRANSFORMER_INPUTS)
    assert profiles.contains(p, {"input_ids": [4, 64]})
    assert not profiles.contains(p, {"input_ids": [64, 64]})
