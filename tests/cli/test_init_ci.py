"""CI that builds where it will serve (`trt-pipeline init --ci github|gitlab`), the pin it is
written from, and the one-line refusals on the way: a pair of images of two TensorRTs, a
machine whose TensorRT is not the pinned image's, a model file that is not ONNX."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import stages
from tests.conftest import REPO, compose

DIGEST = "sha256:" + "ab" * 32
PIN = """
pin:
  build:
    release: "26.07"
    digest: "{digest}"
  serve:
    release: "26.07"
  fleet:
    nvidia-l4:
      product: NVIDIA-L4
    nvidia-a100-sxm4-80gb:
      product: NVIDIA-A100-SXM4-80GB
      runner: [self-hosted, gpu, datacenter]
"""


def cli(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's package
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=repo, capture_output=True, text=True, env=env
    )


@pytest.fixture
def project(tmp_path):
    """A new repository set up by `init`, with a pin of one NGC release and two GPU kinds."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    model = REPO / "pipeline/zoo/onnx/tiny_mlp.onnx"
    (repo / "m.onnx").write_bytes(model.read_bytes())
    assert cli(repo, "init", "--model", "m.onnx").returncode == 0
    with open(repo / "conf/config.yaml", "a") as f:
        f.write(PIN.format(digest=DIGEST))
    r = cli(repo, "params")
    assert r.returncode == 0, r.stderr
    return repo


@pytest.mark.parametrize(
    "ci,schema,file",
    [
        ("github", "vendor.github-workflows", ".github/workflows/engines.yml"),
        ("gitlab", "vendor.gitlab-ci", ".gitlab-ci.yml"),
    ],
)
def test_the_ci_builds_each_gpu_kind_in_the_pinned_image_and_validates(project, ci, schema, file):
    import jsonschema
    from check_jsonschema.builtin_schemas import get_builtin_schema

    r = cli(project, "init", "--ci", ci)
    assert r.returncode == 0 and r.stdout.strip() == f"wrote {file}", r.stderr
    text = (project / file).read_text()
    data = yaml.safe_load(text)
    spec = get_builtin_schema(schema)
    assert not [
        e.message for e in jsonschema.validators.validator_for(spec)(spec).iter_errors(data)
    ]
    image = f"nvcr.io/nvidia/tensorrt:26.07-py3@{DIGEST}"
    assert image in text and "*id" not in text  # pinned by digest; no YAML aliases
    for cmd in ("dvc repro", "trt-pipeline status", "--fail-on-regression", "package --from-store"):
        assert cmd in text, cmd
    if ci == "github":
        job = data["jobs"]["engines"]
        kinds = {m["gpu"]: m["runner"] for m in job["strategy"]["matrix"]["include"]}
        assert kinds == {
            "nvidia-l4": ["self-hosted", "gpu", "nvidia-l4"],
            "nvidia-a100-sxm4-80gb": ["self-hosted", "gpu", "datacenter", "nvidia-a100-sxm4-80gb"],
        }
        assert job["container"]["image"] == image
    else:
        assert data["engines"]["parallel"]["matrix"] == [
            {"GPU_KIND": ["nvidia-l4", "nvidia-a100-sxm4-80gb"]}
        ]
        assert data["engines"]["tags"][-1] == "$GPU_KIND"


def test_ci_without_a_pin_is_one_line(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    r = cli(repo, "init", "--ci", "github")
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "pin a build image and name the fleet's GPU kinds first" in r.stderr
    assert not (repo / ".github").exists()


def test_a_pair_of_images_of_two_tensorrts_is_refused_before_any_work():
    with pytest.raises(PipelineError, match="the pinned images disagree"):
        compose("pin=ngc", "pin.build.release=25.01")


def test_a_machine_whose_tensorrt_is_not_the_pinned_images_builds_nothing(built_cnn, tmp_path):
    """This machine builds with TensorRT-RTX; the pin says full TensorRT 11.1: one line,
    and no engine (the store and this machine's folder are left as they were)."""
    _, built = built_cnn
    layout = Layout(tmp_path / "ws")
    shutil.copytree(built.root / "artifacts", layout.root / "artifacts")
    shutil.rmtree(layout.build_dir)
    cfg = compose("model=cnn", "precision=fp32", "pin=ngc", f"build.store_dir={tmp_path / 's'}")
    with pytest.raises(PipelineError) as e:
        stages.build(cfg, layout, progress=False)
    assert "this machine builds with tensorrt_rtx" in str(e.value)
    assert "pin.build is nvcr.io/nvidia/tensorrt:26.07-py3 (TensorRT 11.1.0.106)" in str(e.value)
    assert not layout.build_dir.exists() and not (tmp_path / "s").exists()


def test_the_fingerprint_records_the_ngc_image_it_runs_in(tmp_path, monkeypatch):
    from pipeline.machine import fingerprint

    monkeypatch.setenv("NVIDIA_TENSORRT_VERSION", "26.07")
    monkeypatch.setenv("TENSORRT_VERSION", "11.1.0.106")
    monkeypatch.setenv("NVIDIA_BUILD_ID", "171234567")
    monkeypatch.setenv("TRT_PIPELINE_IMAGE_DIGEST", DIGEST)
    inside = fingerprint.collect(compose().build, require_trt=False)
    assert inside["container"] == {
        "product": "tensorrt",
        "release": "26.07",
        "tensorrt": "11.1.0.106",
        "build_id": "171234567",
        "digest": DIGEST,
    }
    for name in ("NVIDIA_TENSORRT_VERSION", "TENSORRT_VERSION", "NVIDIA_BUILD_ID"):
        monkeypatch.delenv(name)
    outside = fingerprint.collect(compose().build, require_trt=False)
    assert outside["container"] is None and outside["id"] == inside["id"]


def test_a_model_file_that_is_not_onnx_is_one_line_and_adds_nothing(project):
    (project / "notes.onnx").write_text("these are my notes, not a model\n")
    before = (project / "conf/config.yaml").read_text()
    r = cli(project, "add-model", "notes.onnx")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "--model notes.onnx: not an ONNX model" in r.stderr
    assert (project / "conf/config.yaml").read_text() == before
    assert not (project / "conf/models").exists()
    assert json.loads((project / ".dvc/trt-pipeline-init.json").read_text())
