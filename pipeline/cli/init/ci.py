"""`trt-pipeline init --ci github|gitlab`: CI that builds where it will serve. One job per GPU
kind of the fleet (pin.fleet: a matrix), each on its self-hosted runner inside the pinned
TensorRT image (pin.build, by digest), running `dvc repro` into the team's engine store with
`trt-pipeline status` and `diff --fail-on-regression` as gates; then one job that packages
every kind's engines from that store for the pinned serving image (`package --from-store`:
the Triton repository and its deployment files) and keeps them.

Written as data, then YAML: the tests check the files against the published GitHub Actions
and GitLab CI schemas, offline."""

from __future__ import annotations

import textwrap
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core import ngc, plain_yaml
from pipeline.core.errors import PipelineError

if TYPE_CHECKING:
    from pipeline.core.config_pin import PinConfig

FILES = {"github": ".github/workflows/engines.yml", "gitlab": ".gitlab-ci.yml"}
STORE = "/srv/trt-pipeline/engines"  # the team's engine store on every runner (a shared mount)
HEADER = (
    "Written by `trt-pipeline init --ci {ci}` from params.yaml's pin. Builds in {build}, one "
    "job per GPU kind of pin.fleet on its runner, into the team's engine store at {store} "
    "(mounted on every runner); {serve} serves. Edit pin in conf/config.yaml, then run "
    "`trt-pipeline init --ci {ci}` again to write this file anew."
)


def workflow(ci: str, pin: PinConfig) -> tuple[str, str]:
    """The CI file's path and text for `pin` (its build and serving images and fleet)."""
    build, serve = ngc.pinned(pin, "build"), ngc.pinned(pin, "serve")
    if build is None or not pin.fleet:
        raise PipelineError(
            "init --ci: pin a build image and name the fleet's GPU kinds first (pin.build, "
            "pin.fleet in conf/config.yaml; docs/pinned-images.md)"
        )
    kinds = {str(k): [str(r) for r in v.runner] + [str(k)] for k, v in pin.fleet.items()}
    data = (_github if ci == "github" else _gitlab)(str(build), build.digest or "", kinds)
    head = HEADER.format(ci=ci, build=build, serve=serve or "no pinned image", store=STORE)
    lines = textwrap.wrap(head, 98, break_long_words=False, break_on_hyphens=False)
    body = plain_yaml.dump(data)
    return FILES[ci], "".join(f"# {line}\n" for line in lines) + body


def _install() -> str:
    try:
        version = metadata.version("trt-pipeline")
    except metadata.PackageNotFoundError:
        version = None
    # TensorRT is the image's own: the tool only, at the version that wrote this file
    return f'pip install "trt-pipeline=={version}"' if version else "pip install trt-pipeline"


def _steps_build() -> list[str]:
    return ["dvc pull --allow-missing || true", "dvc repro", "trt-pipeline status"]


def _run(name: str, cmd: str, **more: str) -> dict[str, str]:
    return {"name": name, "run": cmd, **more}


# Open shape: a GitHub Actions workflow, checked against its schema in tests.
def _github(image: str, digest: str, kinds: dict[str, list[str]]) -> dict[str, Any]:
    container = {"image": image, "options": "--gpus all", "volumes": [f"{STORE}:{STORE}"]}
    env = {"TRT_PIPELINE_STORE": STORE, "TRT_PIPELINE_IMAGE_DIGEST": digest}
    checkout = {"uses": "actions/checkout@v4", "with": {"fetch-depth": 0}}
    engines = {
        "name": "engines (${{ matrix.gpu }})",
        "strategy": {
            "fail-fast": False,
            "matrix": {"include": [{"gpu": k, "runner": r} for k, r in kinds.items()]},
        },
        "runs-on": "${{ matrix.runner }}",
        "container": container,
        "env": env,
        "steps": [
            checkout,
            _run("install", _install()),
            *[_run(" ".join(cmd.split()[:2]), cmd) for cmd in _steps_build()],
            _run(
                "no regression against the base",
                "trt-pipeline diff origin/${{ github.base_ref }} artifacts/inspect "
                "--fail-on-regression",
                **{"if": "github.event_name == 'pull_request'"},
            ),
        ],
    }
    package = {
        "needs": "engines",
        "runs-on": ["self-hosted"],
        "container": {"image": image, "volumes": [f"{STORE}:{STORE}"]},
        "env": env,
        "steps": [
            checkout,
            _run("install", _install()),
            _run("package", "trt-pipeline package --from-store"),
            {
                "uses": "actions/upload-artifact@v4",
                "with": {"name": "triton-repository", "path": "repository\ndeploy\n"},
            },
        ],
    }
    return {
        "name": "engines",
        "on": {"push": {"branches": ["main"]}, "pull_request": None, "workflow_dispatch": None},
        "jobs": {"engines": engines, "package": package},
    }


# Open shape: a GitLab CI/CD pipeline (.gitlab-ci.yml), checked against its schema in tests.
def _gitlab(image: str, digest: str, kinds: dict[str, list[str]]) -> dict[str, Any]:
    variables = {"TRT_PIPELINE_STORE": STORE, "TRT_PIPELINE_IMAGE_DIGEST": digest}
    runner_tags = sorted({t for tags in kinds.values() for t in tags[:-1] if t != "self-hosted"})
    return {
        "stages": ["engines", "package"],
        "engines": {
            "stage": "engines",
            "image": {"name": image, "entrypoint": [""]},
            "parallel": {"matrix": [{"GPU_KIND": list(kinds)}]},
            "tags": [*runner_tags, "$GPU_KIND"],
            "variables": variables,
            "script": [_install(), *_steps_build()],
        },
        "no-regression": {
            "stage": "engines",
            "image": {"name": image, "entrypoint": [""]},
            "needs": ["engines"],
            "rules": [{"if": "$CI_PIPELINE_SOURCE == 'merge_request_event'"}],
            "tags": runner_tags,
            "variables": variables,
            "script": [
                _install(),
                "dvc repro",
                "trt-pipeline diff origin/$CI_MERGE_REQUEST_TARGET_BRANCH_NAME artifacts/inspect "
                "--fail-on-regression",
            ],
        },
        "package": {
            "stage": "package",
            "image": {"name": image, "entrypoint": [""]},
            "tags": runner_tags,
            "variables": variables,
            "script": [_install(), "trt-pipeline package --from-store"],
            "artifacts": {"paths": ["repository/", "deploy/"]},
        },
    }


def write(ci: str, pin: PinConfig) -> str:
    """The CI file for `pin`, written (atomically); its path."""
    from pipeline.core import fileio

    path, text = workflow(ci, pin)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fileio.write_text(path, text)
    return path
