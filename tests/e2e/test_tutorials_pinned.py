"""docs/tutorials/pinned-images.md, as written, in a new git repository on this CPU-only
machine: the refusals a machine outside the pinned image gets (the pair of images, the build,
the package), each one line; the CI file and the deployment files checked against their
published schemas, offline. What needs the image and a GPU is tested up to that line."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e.tutorial_pages import blocks, sh

PAGE = "pinned-images.md"
TRT = "11.1.0.106"


def _errors(schema: str, data: object) -> list[str]:
    import jsonschema
    from check_jsonschema.builtin_schemas import get_builtin_schema

    spec = get_builtin_schema(schema)
    return [e.message for e in jsonschema.validators.validator_for(spec)(spec).iter_errors(data)]


def _error_line(r) -> str:
    return next(x for x in r.stderr.splitlines() if x.startswith("error: "))


@pytest.mark.e2e
def test_pinned_images_tutorial(tmp_path):
    import kubernetes_validate

    repo = tmp_path / "shop"
    repo.mkdir()
    new, releases, pin, mismatched, ci, pinned_repro, serve_only, deploy = blocks(PAGE)
    sh(repo, new)
    assert "26.07    11.1.0.106       2.71.0" in sh(repo, releases).stdout
    sh(repo, pin)
    params = (repo / "params.yaml").read_text()
    assert json.loads(params)["pin"]["build"]["release"] == "26.07"

    said = _error_line(sh(repo, mismatched))
    assert "the pinned images disagree" in said and "10.8.0.43" in said and TRT in said
    assert (repo / "params.yaml").read_text() == params  # refused before it was written

    sh(repo, ci)
    workflow = yaml.safe_load((repo / ".github/workflows/engines.yml").read_text())
    assert not _errors("vendor.github-workflows", workflow)
    job = workflow["jobs"]["engines"]
    assert job["container"]["image"].startswith("nvcr.io/nvidia/tensorrt:26.07-py3@sha256:0a3c")
    kinds = [m["gpu"] for m in job["strategy"]["matrix"]["include"]]
    assert kinds == ["nvidia-l4", "nvidia-h100-80gb-hbm3"]

    refused = sh(repo, pinned_repro)
    said = _error_line(refused)
    assert said.startswith("error: this machine builds with tensorrt_rtx") and TRT in said
    assert not list((repo / "artifacts/build").glob("*/engine.plan"))
    fingerprint = json.loads((repo / "artifacts/fingerprint.json").read_text())
    assert fingerprint["container"] is None  # not inside an NGC image here

    said = _error_line(sh(repo, serve_only))
    assert "built by TensorRT-RTX" in said and f"full TensorRT {TRT}) cannot load it" in said
    assert list((repo / "artifacts/build").glob("*/engine.plan"))  # built, then refused
    assert not (repo / "repository").exists()

    sh(repo, deploy)
    image = "nvcr.io/nvidia/tritonserver:26.07-py3@sha256:5e7a"
    compose = yaml.safe_load((repo / "deploy/compose.yaml").read_text())
    assert not _errors("vendor.compose-spec", compose)
    assert sorted(compose["services"]) == ["triton-nvidia-h100-80gb-hbm3", "triton-nvidia-l4"]
    for service in compose["services"].values():
        assert service["image"].startswith(image)
        assert service["volumes"] == ["../repository:/models:ro"]
    manifests = sorted((repo / "deploy/kubernetes").glob("*.yaml"))
    assert [p.stem for p in manifests] == ["nvidia-h100-80gb-hbm3", "nvidia-l4", "service"]
    for path in manifests:
        for doc in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(doc, "1.30", strict=True)
            if doc["kind"] == "Deployment":
                pod = doc["spec"]["template"]["spec"]
                assert pod["containers"][0]["image"].startswith(image)
                assert pod["nodeSelector"]["nvidia.com/gpu.product"] in (
                    "NVIDIA-L4",
                    "NVIDIA-H100-80GB-HBM3",
                )
