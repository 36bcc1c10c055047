"""A config of several models (core/models.py): one model's config is the project's with
that entry's four groups in its place; every entry is checked with the config, and what is
wrong with one is one line naming it."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from pipeline.core import config, models
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from tests.conftest import REPO


@pytest.fixture
def two(tmp_path):
    raw = OmegaConf.load(REPO / "params.yaml")
    raw.models = {n: {g: raw[g] for g in models.PER_MODEL} for n in ("det", "rec")}
    raw.models.rec.precision.name = "fp16"
    raw.models.rec.model.name = "rec"
    return raw, tmp_path / "params.yaml"


def test_one_model_takes_its_own_groups_and_the_shared_ones(two):
    raw, path = two
    OmegaConf.save(raw, path)
    rec = config.load(path, "rec")
    assert rec.precision.name == "fp16" and rec.model.name == "rec"
    assert rec.build == config.load(path).build
    assert config.load(path, "det").precision.name == raw.precision.name
    assert Layout(model="rec").calibrate_dir.as_posix() == "artifacts/rec/calibrate"
    assert Layout(model="rec").fingerprint == Layout().fingerprint


@pytest.mark.parametrize(
    "edit, line",
    [
        (lambda r: r.models.rec.pop("profile"), "models.rec has no profile group"),
        (lambda r: r.models.rec.__setitem__("build", {}), "models.rec.build: a model holds"),
        (
            lambda r: r.models.rec.precision.__setitem__("name", "fp13"),
            "models.rec: invalid config: precision.name: Invalid value 'fp13'",
        ),
    ],
)
def test_a_bad_entry_is_one_line_naming_it(two, edit, line):
    raw, path = two
    edit(raw)
    OmegaConf.save(raw, path)
    with pytest.raises(PipelineError) as e:
        config.load(path)  # the project's config checks every model
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


def test_a_model_the_config_does_not_name_is_one_line(two):
    raw, path = two
    OmegaConf.save(raw, path)
    with pytest.raises(
        PipelineError, match=r"^no model 'cls' in the config's models \(det, rec\)$"
    ):
        config.load(path, "cls")


def test_a_sweep_of_several_models_builds_the_one_it_names(two):
    raw, _ = two
    with pytest.raises(PipelineError, match=r"several models \(det, rec\): give the one"):
        models.swept(raw)
    raw.sweep.model = "rec"
    assert config.validate(models.swept(raw)).precision.name == "fp16"
    raw.sweep.model = "cls"
    with pytest.raises(PipelineError, match=r"^sweep.model=cls: no such model \(det, rec\)$"):
        config.validate(raw)


def test_a_jobs_key_takes_its_models_files_from_the_several_models_dvc_yaml(two, tmp_path):
    """Job reuse hashes the files dvc.yaml's stages read; in a project of several models
    they are each stage's `do`, templated by the model's config (`${item.model.source}`)."""
    from pipeline.sweeps import job_cache

    raw, _ = two
    raw.models.rec.model.source = "models/rec.onnx"
    raw.sweep.model = "rec"
    (tmp_path / "dvc.yaml").write_text(
        (REPO / "pipeline/cli/init/files/dvc_models.yaml.in").read_text()
    )
    static, from_config = job_cache.dvc_deps(tmp_path, config.validate(models.swept(raw)))
    assert "models/rec.onnx" in from_config and "data/calibration" in static
    assert not any("${" in d for d in static | from_config)
