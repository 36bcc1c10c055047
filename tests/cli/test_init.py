"""`trt-pipeline init` in a fresh git repository: what it writes, that a rerun replaces
only its own unchanged files, that anything else in the way stops it with one line before
anything is written, and --model. (tests/e2e/test_wheel.py runs `dvc repro` after it,
from an installed wheel.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

WRITTEN = (
    "dvc.yaml",
    "machine/dvc.yaml",
    "conf/config.yaml",
    "params.yaml",
    "data/README.md",
    "data/reference/.gitkeep",
    "data/calibration/.gitkeep",
    ".dvc/plots/trt_by_backend.json",
)


def trt(repo, *args):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=repo, capture_output=True, text=True
    )


def init(repo, *args):
    return trt(repo, "init", *args)


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "team"
    r.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=r, check=True)
    return r


def test_init_writes_the_scaffolding_and_a_rerun_keeps_it(repo):
    r = init(repo)
    assert r.returncode == 0, r.stderr
    assert (repo / ".dvc").is_dir() and "ran dvc init" in r.stdout
    # `dvc exp run -S` composes conf/ through Hydra
    assert "[hydra]" in (repo / ".dvc/config").read_text()
    for name in WRITTEN:
        assert (repo / name).is_file(), name
    stages = {
        **yaml.safe_load((repo / "machine/dvc.yaml").read_text())["stages"],
        **yaml.safe_load((repo / "dvc.yaml").read_text())["stages"],
    }
    assert [s["cmd"] for s in stages.values()] == [
        f"trt-pipeline stage {n}"
        for n in ("fingerprint", "export", "calibrate", "build", "inspect", "benchmark", "package")
    ]
    conf = yaml.safe_load((repo / "conf/config.yaml").read_text())
    assert conf["hydra"]["searchpath"] == ["pkg://pipeline.conf"]
    assert list((repo / "conf").iterdir()) == [repo / "conf/config.yaml"]  # only overrides
    params = yaml.safe_load((repo / "params.yaml").read_text())
    assert params["model"]["factory"] == "pipeline.zoo.cnn_classifier"
    assert "/outputs/" in (repo / ".gitignore").read_text().splitlines()
    before = {n: (repo / n).read_bytes() for n in WRITTEN}
    again = init(repo)
    assert again.returncode == 0, again.stderr
    assert "ran dvc init" not in again.stdout and "hydra" not in again.stdout
    assert ".gitignore" not in again.stdout
    assert {n: (repo / n).read_bytes() for n in WRITTEN} == before
    assert (repo / ".gitignore").read_text().count("/outputs/") == 1


@pytest.mark.parametrize("name", ["dvc.yaml", "params.yaml", "conf/config.yaml"])
def test_init_refuses_a_file_it_did_not_write(repo, name):
    (repo / name).parent.mkdir(exist_ok=True)
    (repo / name).write_text("mine: 1\n")
    r = init(repo)
    assert r.returncode == 1
    assert r.stderr.startswith(f"error: {name} exists and was not written by trt-pipeline init")
    assert len(r.stderr.splitlines()) == 1
    assert (repo / name).read_text() == "mine: 1\n"
    assert not (repo / ".dvc").exists() and not (repo / "data").exists()  # nothing written


def test_init_refuses_its_own_file_once_edited(repo):
    assert init(repo).returncode == 0
    conf = repo / "conf/config.yaml"
    conf.write_text(conf.read_text() + "precision: {tf32: true}\n")
    r = init(repo)
    assert r.returncode == 1 and "conf/config.yaml exists" in r.stderr


def test_init_with_model_fills_in_the_onnx_file(repo):
    (repo / "models").mkdir()
    onnx = repo / "models" / "mlp.onnx"
    onnx.write_bytes((REPO / "pipeline/zoo/onnx/tiny_mlp.onnx").read_bytes())
    r = init(repo, "--model", "models/mlp.onnx")
    assert r.returncode == 0, r.stderr
    model = yaml.safe_load((repo / "params.yaml").read_text())["model"]
    assert model["factory"] is None
    assert model["onnx_path"] == model["source"] == "models/mlp.onnx"
    assert model["name"] == "mlp"


def test_init_with_a_missing_model_or_outside_git_is_one_line(repo, tmp_path):
    r = init(repo, "--model", "nope.onnx")
    assert (r.returncode, r.stderr) == (1, "error: --model nope.onnx: no such file\n")
    assert not (repo / "dvc.yaml").exists()
    bare = tmp_path / "bare"
    bare.mkdir()
    r = init(bare)
    assert r.returncode == 1 and "not in a git repository" in r.stderr


def test_a_conf_that_does_not_compose_leaves_no_scaffolding(repo):
    """An option of the repository's own conf/ shadows the package's (it comes first on
    Hydra's search path); one that breaks the schema stops init before params.yaml, and
    what this run wrote goes again."""
    (repo / "conf/precision").mkdir(parents=True)
    (repo / "conf/precision/fp32.yaml").write_text("name: fp32\nworkspase: 1\n")
    r = init(repo)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "workspase" in r.stderr
    assert not any((repo / n).exists() for n in WRITTEN)


def test_init_with_several_models_writes_a_file_each_and_add_model_one_more(repo):
    model = REPO / "pipeline/zoo/onnx/tiny_mlp.onnx"
    for name in ("det", "rec", "cls"):
        (repo / f"{name}.onnx").write_bytes(model.read_bytes())
    r = init(repo, "--model", "det.onnx", "--model", "rec.onnx")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (repo / "conf/models").iterdir()) == ["det.yaml", "rec.yaml"]
    stages = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]
    assert stages["export"]["do"]["cmd"] == "trt-pipeline stage export --model ${key}"
    params = yaml.safe_load((repo / "params.yaml").read_text())
    assert list(params["models"]) == ["det", "rec"]
    # The one-model groups stay out: DVC parses params.yaml once per stage with params.
    assert not {"model", "precision", "profile", "calibration"} & set(params)
    for name, entry in params["models"].items():  # every group whole: DVC tracks it alone
        assert set(entry) == {"model", "precision", "profile", "calibration"}
        assert entry["model"]["onnx_path"] == entry["model"]["source"] == f"{name}.onnx"
    added = trt(repo, "add-model", "cls.onnx")
    assert added.returncode == 0, added.stderr
    params = yaml.safe_load((repo / "params.yaml").read_text())
    assert list(params["models"]) == ["det", "rec", "cls"]
    again = trt(repo, "add-model", "cls.onnx")
    assert again.returncode == 1
    assert (
        again.stderr
        == "error: conf/models/cls.yaml exists: remove it, or give the model another --name\n"
    )
    one = trt(repo, "stage", "export")
    assert one.returncode == 1
    assert one.stderr == "error: stage export: this project has several models; give --model\n"
    # A one-model group set at the top level would be read by no model: refused, naming
    # the model's own place; params.yaml (JSON, as written) is left as it was.
    before = (repo / "params.yaml").read_text()
    top = trt(repo, "params", "precision=fp16")
    assert top.returncode == 1 and top.stderr == (
        "error: precision=fp16: this project's models (det, rec, cls) each have their own "
        "precision, and the top level's is read by none; name a model's, e.g. "
        "'precision@models.det.precision=fp16'\n"
    )
    assert (repo / "params.yaml").read_text() == before
    assert json.loads(before)["models"]["cls"]["precision"]["name"] == "fp32"
    own = trt(repo, "params", "precision@models.cls.precision=fp16")
    assert own.returncode == 0, own.stderr
    params = json.loads((repo / "params.yaml").read_text())
    assert params["models"]["cls"]["precision"]["name"] == "fp16" and "precision" not in params


def test_two_models_of_one_name_are_one_line(repo):
    model = REPO / "pipeline/zoo/onnx/tiny_mlp.onnx"
    for folder in ("a", "b"):
        (repo / folder).mkdir()
        (repo / folder / "m.onnx").write_bytes(model.read_bytes())
    r = init(repo, "--model", "a/m.onnx", "--model", "b/m.onnx")
    assert r.returncode == 1
    assert r.stderr == "error: two models would be named 'm'; give each a --name\n"
    assert not (repo / "dvc.yaml").exists()
