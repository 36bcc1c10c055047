"""The release that builds a plan is the release that serves it: the pinned serving image
refuses plans it cannot load, names itself beside every model, and the deployment files it
is pinned in validate against the Compose and Kubernetes schemas, offline. The engines are
real TensorRT-RTX builds of this CPU; where a plan of full TensorRT is needed, one engine's
record says so (what a GPU host's build would record): the package reads nothing else."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import yaml

from pipeline.core import ngc
from pipeline.core.errors import PipelineError
from pipeline.serve import deploy, repository
from tests.conftest import REPO, compose

DIGEST = "sha256:" + "cd" * 32
TRT11 = "11.1.0.106"


def pinned(*more: str):
    return compose(
        "pin=ngc",
        f"pin.serve.digest={DIGEST}",
        "+pin.fleet.nvidia-l4={product: NVIDIA-L4}",
        "+pin.fleet.nvidia-l40s={product: NVIDIA-L40S}",
        *more,
    ).pin


def as_full_tensorrt(engine, version=TRT11, gpu=("NVIDIA L4", "8.9")):
    """The engine as a GPU host's full TensorRT build records it (its plan file is this
    CPU's: the package copies bytes, it does not load them)."""
    return dataclasses.replace(
        engine,
        flavour="tensorrt",
        trt_version=version,
        gpu=gpu[0],
        compute_capability=gpu[1],
        fingerprint_id=f"{gpu[0].split()[-1].lower()}-trt{version}",
        built_in=f"nvcr.io/nvidia/tensorrt:26.07-py3@{DIGEST}",
    )


def test_a_plan_the_serving_image_cannot_load_is_refused_in_one_line(built_cnn, tmp_path):
    _, layout = built_cnn
    rtx = repository.engines_in(layout.build_dir)
    serve = ngc.resolve("serve", pinned().serve)
    with pytest.raises(PipelineError, match="built by TensorRT-RTX .* cannot load it"):
        repository.write(tmp_path / "repo", "cnn", rtx, serve=serve)
    older = [as_full_tensorrt(rtx[0], "10.8.0.43")]
    with pytest.raises(PipelineError) as e:
        repository.write(tmp_path / "repo", "cnn", older, serve=serve)
    line = str(e.value)
    assert "TensorRT 10.8.0.43" in line and f"loads TensorRT {TRT11} plans only" in line
    assert "\n" not in line and not (tmp_path / "repo").exists()  # nothing written


def test_the_repository_names_its_server_and_the_build_image(built_cnn, tmp_path):
    _, layout = built_cnn
    engine = as_full_tensorrt(repository.engines_in(layout.build_dir)[0])
    serve = ngc.resolve("serve", pinned().serve)
    repository.write(tmp_path / "repo", "cnn", [engine], serve=serve)
    folder = tmp_path / "repo" / "cnn"
    first = (folder / "serving.txt").read_text().splitlines()[0]
    assert first == (
        f"Serve with nvcr.io/nvidia/tritonserver:26.07-py3@{DIGEST} (Triton 2.71.0, "
        f"TensorRT {TRT11})."
    )
    config = (folder / "config.pbtxt").read_text()
    assert config.startswith(f"# {first}\n")
    assert f"built by tensorrt {TRT11} in nvcr.io/nvidia/tensorrt:26.07-py3@" in config


def test_deployment_files_are_pinned_by_digest_and_valid(built_cnn, tmp_path):
    """One Deployment per GPU kind on its nodes, the config of its own where two kinds share
    a compute capability (L4 and L40S, 8.9), ready on Triton's endpoint, the repository
    read-only; one Compose service per kind; checked against the published schemas."""
    import jsonschema
    import kubernetes_validate
    from check_jsonschema.builtin_schemas import get_builtin_schema

    _, layout = built_cnn
    base = repository.engines_in(layout.build_dir)[0]
    fleet = [as_full_tensorrt(base), as_full_tensorrt(base, gpu=("NVIDIA L40S", "8.9"))]
    pin = pinned()
    repository.write(tmp_path / "repository", "cnn", fleet, serve=ngc.resolve("serve", pin.serve))
    written = deploy.write(tmp_path / "deploy", tmp_path / "repository", pin)
    names = sorted(p.relative_to(tmp_path / "deploy").as_posix() for p in written)
    assert names == [
        "compose.yaml",
        "kubernetes/nvidia-l4.yaml",
        "kubernetes/nvidia-l40s.yaml",
        "kubernetes/service.yaml",
    ]
    image = f"nvcr.io/nvidia/tritonserver:26.07-py3@{DIGEST}"
    spec = get_builtin_schema("vendor.compose-spec")
    compose_file = yaml.safe_load((tmp_path / "deploy" / "compose.yaml").read_text())
    assert not list(jsonschema.validators.validator_for(spec)(spec).iter_errors(compose_file))
    l4 = compose_file["services"]["triton-nvidia-l4"]
    assert l4["image"] == image and l4["volumes"] == ["../repository:/models:ro"]
    assert "--model-config-name=nvidia-l4" in l4["command"] and l4["profiles"] == ["nvidia-l4"]
    for path in written[1:]:
        for doc in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(doc, "1.30", strict=True)
    deployment = yaml.safe_load((tmp_path / "deploy/kubernetes/nvidia-l40s.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    assert container["image"] == image
    assert container["args"][-1] == "--model-config-name=nvidia-l40s"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["volumeMounts"][0]["readOnly"] is True


def test_a_schema_file_that_is_not_tritons_is_refused_and_never_run(built_cnn, tmp_path):
    """`package --triton-schema FILE` reads data out of a tritonclient wheel; a file named
    there is never run (before, it was exec'd whatever it held)."""
    repo = tmp_path / "r"
    evil = tmp_path / "evil.py"
    marker = tmp_path / "ran"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "package",
            "--name",
            "cnn",
            "--triton-schema",
            str(evil),
        ],
        cwd=built_cnn[1].root,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": ""},
    )
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "not a tritonclient wheel" in r.stderr and not marker.exists()
    assert not repo.exists()
