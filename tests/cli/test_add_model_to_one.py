"""`trt-pipeline add-model` in a project of one model: the model moves to
conf/models/<name>.yaml with its choices, settings and comments, dvc.yaml becomes init's
for several models, dvc.lock forgets the old stages, and `dvc repro` builds both models,
the first one's engine from the store."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.cli.test_init import init, trt
from tests.conftest import REPO
from tests.helpers import dvc, ran_stages

MODEL = REPO / "pipeline/zoo/onnx/tiny_mlp.onnx"
EDITS = """\
benchmark:
  min_duration_s: 0.05
  warmup_s: 0.01
  backends: [onnxruntime]
# ours: the sample batch of the first model
profile:
  shapes:  # min, opt, max
    features: [1x16, 2x16, 4x16]
"""


@pytest.fixture
def one(tmp_path):
    repo = tmp_path / "team"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    for name in ("first.onnx", "second.onnx"):
        (repo / name).write_bytes(MODEL.read_bytes())
    assert init(repo, "--model", "first.onnx").returncode == 0
    config = repo / "conf/config.yaml"
    text = config.read_text().replace(
        "  - override model: onnx_file\n",
        "  - override model: onnx_file\n  - override precision: fp16\n",
    )
    config.write_text(text + EDITS)
    assert trt(repo, "params").returncode == 0
    return repo


def test_a_one_model_project_becomes_one_of_several(one):
    dvc(one, "repro")
    assert (one / "dvc.lock").is_file() and "export" in yaml.safe_load(
        (one / "dvc.lock").read_text()
    )["stages"]
    r = trt(one, "add-model", "second.onnx")
    assert r.returncode == 0, r.stderr
    assert "the one model is models.first" in r.stdout
    assert "artifacts/export" in r.stdout.splitlines()[2]  # left for the user
    config = (one / "conf/config.yaml").read_text()
    assert "  - models: [first, second]\n" in config and "override precision" not in config
    assert "\nbenchmark:\n" in config and "\nprofile:" not in config
    own = (one / "conf/models/first.yaml").read_text()
    assert own.startswith("# @package models.first\n")
    assert "  - /precision@precision: fp16\n" in own and "  - /model@model: onnx_file\n" in own
    assert "shapes:  # min, opt, max" in own  # the user's comment moved with its block
    params = json.loads((one / "params.yaml").read_text())
    assert list(params["models"]) == ["first", "second"] and "precision" not in params
    assert params["models"]["first"]["precision"]["name"] == "fp16"
    assert params["models"]["first"]["profile"]["shapes"] == {"features": ["1x16", "2x16", "4x16"]}
    assert params["models"]["second"]["precision"]["name"] == "fp32"
    assert (one / "dvc.yaml").read_text() == (
        REPO / "pipeline/cli/init/files/dvc_models.yaml.in"
    ).read_text()
    assert "export" not in yaml.safe_load((one / "dvc.lock").read_text())["stages"]
    (engine,) = (one / "artifacts/build").glob("*/engine.plan")
    r = dvc(one, "repro")
    assert {"build@first", "build@second", "index"} <= set(ran_stages(r.stdout))
    # the first model's engine is the one built before the move, from the store
    assert re.search(r"engine store hit: \w+ \(first fp16", r.stdout + r.stderr)
    moved = one / "artifacts/first/build" / engine.parent.name / "engine.plan"
    assert moved.read_bytes() == engine.read_bytes()
    assert list((one / "artifacts/second/build").glob("*/engine.plan"))
    # a later add-model extends the list, as in any project of several models
    (one / "third.onnx").write_bytes(MODEL.read_bytes())
    assert trt(one, "add-model", "third.onnx").returncode == 0
    assert "  - models: [first, second, third]\n" in (one / "conf/config.yaml").read_text()


def test_a_one_model_project_whose_dvc_yaml_was_edited_is_left_as_it_was(one):
    (one / "dvc.yaml").write_text((one / "dvc.yaml").read_text() + "# ours\n")
    before = {p: p.read_bytes() for p in one.rglob("*") if p.is_file() and ".git" not in p.parts}
    r = trt(one, "add-model", "second.onnx")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1
    assert "dvc.yaml is not the one trt-pipeline init wrote" in r.stderr
    after = {p: p.read_bytes() for p in one.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == before


def test_a_second_model_of_the_first_ones_name_is_one_line(one):
    r = trt(one, "add-model", "second.onnx", "--name", "first")
    assert r.returncode == 1
    assert r.stderr == "error: this project's model is named 'first' already: give --name\n"
    assert not (one / "conf/models").exists()
