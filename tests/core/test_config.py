import subprocess
import sys

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ReadonlyConfigError

from pipeline.core import config
from pipeline.core.errors import PipelineError
from tests.conftest import REPO, compose


def test_params_yaml_is_the_composition_of_conf_defaults():
    committed = OmegaConf.to_container(OmegaConf.load(REPO / "params.yaml"))
    assert committed == config.to_dict(compose()), (
        "regenerate params.yaml: python -m pipeline params"
    )


@pytest.mark.parametrize(
    "group,option",
    [
        (p.parent.name, p.stem)
        for conf in (REPO / "pipeline" / "conf", REPO / "conf")  # the package's, this repo's
        for p in sorted(conf.glob("*/*.yaml"))
    ],
)
def test_every_group_option_validates(group, option, tmp_path):
    cfg = compose(f"{group}={option}", *_needs(group, option, tmp_path))
    if "name" in cfg[group]:
        assert cfg[group].name == option


def _needs(group: str, option: str, tmp_path) -> list[str]:
    """What an option needs besides itself: model=hf_decoder a folder to read."""
    if (group, option) != ("model", "hf_decoder"):
        return []
    import json
    import shutil

    shutil.copy(REPO / "pipeline" / "zoo" / "onnx" / "tiny_mlp.onnx", tmp_path / "model.onnx")
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 64}))
    return [f"model.folder={tmp_path}"]


# What the default composition sets apart from the schema's defaults, and why: anything
# else a default option (build/default.yaml, precision/fp32.yaml, ...) writes must equal
# the schema's value, so a default changed in one place only fails here.
DEFAULT_OVERRIDES = {
    "model.source": "the bundled model's folder, an interpolation",
    "model.task": "the bundled CNN is a classifier; a user's model starts at auto",
    "precision.gate.max_abs_error": "fp32's gate is tight; the schema's gate is none",
    "precision.gate.max_rel_error": "as above",
    "precision.gate.min_cosine": "as above",
    "precision.gate.min_top1_agreement": "as above",
    "precision.gate.max_perplexity_increase": "as above",
    "model.reference_source": "an interpolation over model.reference_data and model.prompts",
    "profile.profiles": "the bundled models' dims; a user's model names its own",
}


def _leaves(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _at(tree, path):
    for part in path.split("."):
        tree = tree[part]
    return tree


def test_the_default_options_restate_the_schema_and_override_only_what_they_say():
    import yaml

    schema = OmegaConf.to_container(OmegaConf.structured(config.PipelineConfig))
    top = yaml.safe_load((REPO / "pipeline/conf/trt_pipeline.yaml").read_text())
    chosen = [next(iter(d.items())) for d in top["defaults"] if isinstance(d, dict)]
    differ = {}
    for group, option in chosen:
        if group.startswith("override "):
            continue
        data = yaml.safe_load((REPO / "pipeline/conf" / group / f"{option}.yaml").read_text())
        data.pop("defaults", None)
        written = dict(_leaves(data, f"{group}."))
        for path, value in written.items():
            if value != _at(schema, path):
                differ[path] = (value, _at(schema, path))
        # params.yaml is composed from the YAML: a key it leaves out is missing there
        unwritten = [p for p, _ in _leaves(schema[group], f"{group}.") if p not in written]
        assert not unwritten, f"{group}/{option}.yaml leaves out {unwritten}"
    unexpected = {k: v for k, v in differ.items() if k not in DEFAULT_OVERRIDES}
    assert not unexpected, (
        "a default option and the schema (pipeline/core/config.py) disagree: "
        + ", ".join(f"{k}: YAML {v[0]!r}, schema {v[1]!r}" for k, v in unexpected.items())
    )
    assert set(differ) == set(DEFAULT_OVERRIDES), "DEFAULT_OVERRIDES names a key no longer set"


def test_misspelt_key_fails_with_its_full_name():
    with pytest.raises(PipelineError, match=r"build\.worksapce_mib"):
        config.validate({"build": {"worksapce_mib": 10}})


def test_wrong_type_fails():
    with pytest.raises(PipelineError, match=r"build\.workspace_mib"):
        config.validate({"build": {"workspace_mib": "lots"}})


def test_unknown_precision_fails():
    with pytest.raises(PipelineError, match=r"precision\.name: Invalid value 'int9'"):
        config.validate({"precision": {"name": "int9"}})


def test_profile_min_greater_than_opt_fails():
    with pytest.raises(PipelineError, match="min <= opt <= max"):
        config.validate({"profile": {"profiles": [{"name": "p", "dims": {"batch": [8, 4, 16]}}]}})


def test_a_zero_dim_is_one_rule_for_dims_and_shapes():
    """A decoder's prefill profile has an empty past: dims take min 0 as shapes do, and
    refuse a negative one alike."""
    past = {"name": "prefill", "dims": {"past_seq": [0, 0, 127], "seq": [1, 64, 128]}}
    config.validate({"profile": {"profiles": [past]}})
    shapes = {"name": "prefill", "shapes": {"past": {"min": [1, 0], "opt": [1, 0], "max": [1, 8]}}}
    config.validate({"profile": {"profiles": [shapes]}})
    with pytest.raises(PipelineError, match=r"needs 0 <= min <= opt <= max, got -1"):
        config.validate(
            {"profile": {"profiles": [{"name": "p", "dims": {"past_seq": [-1, 0, 4]}}]}}
        )


def test_model_needs_exactly_one_source():
    with pytest.raises(PipelineError, match="exactly one"):
        config.validate(
            {"model": {"factory": "pipeline.zoo.cnn_classifier", "onnx_path": "x.onnx"}}
        )


def test_validated_config_is_read_only():
    cfg = config.validate({})
    with pytest.raises(ReadonlyConfigError):
        cfg.build.workspace_mib = 1


def test_stage_with_bad_params_exits_1_with_one_line(tmp_path):
    (tmp_path / "params.yaml").write_text("model:\n  nmae: cnn\n")
    r = subprocess.run(
        [sys.executable, "-m", "stages.export"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "model.nmae" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "artifacts").exists()
