"""The wheel as a team installs it: built from the working tree, installed (not editable)
in a fresh virtualenv, `trt-pipeline init` in an empty git repository, then `dvc repro`
there on the CPU with the default toy model.

The virtualenv sees this interpreter's packages (--system-site-packages) so that torch and
the rest are not downloaded again; pip still resolves the wheel's ranges against them
(offline: a range the installed versions miss fails the install), and the test checks that
`pipeline` is imported from the virtualenv, not from this checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PACKAGED = ("pyproject.toml", "README.md", "pipeline", "hydra_plugins")


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, (
        f"{cmd[:4]} exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    )
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Built from a copy of the working tree's packaged files, so no build/ or egg-info
    lands in the checkout."""
    src = tmp_path_factory.mktemp("wheel_src")
    listed = run(["git", "ls-files", "-co", "--exclude-standard", *PACKAGED], REPO).split()
    for f in listed:
        if (REPO / f).is_file() and "__pycache__" not in f:
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            (src / f).write_bytes((REPO / f).read_bytes())
    dist = tmp_path_factory.mktemp("dist")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(src),
        ],
        src,
    )
    (built,) = dist.glob("trt_pipeline-*.whl")
    return built


def test_the_wheel_carries_the_package_and_no_generic_top_level_module(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"pipeline", "hydra_plugins"}  # no `stages`, no `models`
    for needed in (
        "pipeline/conf/trt_pipeline.yaml",
        "pipeline/conf/model/cnn.yaml",
        "pipeline/conf/benchmark/plot_by_backend.json",
        "pipeline/zoo/cnn_classifier.py",
        "pipeline/zoo/onnx/tiny_mlp.onnx",
        "pipeline/cli/init_files/dvc.yaml.in",
        "pipeline/report/templates/report.html.j2",
    ):
        assert needed in names, needed


def test_init_and_dvc_repro_from_the_installed_wheel(wheel, tmp_path):
    venv = tmp_path / "venv"
    # No pip of its own: the interpreter's pip and setuptools (seen through the system
    # site) install into it, so the venv's bundled old setuptools shadows nothing.
    run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        tmp_path,
    )
    py = venv / "bin" / "python"
    run([str(py), "-m", "pip", "install", "--no-index", "-q", f"{wheel}[rtx]"], tmp_path)
    site = Path(run([str(py), "-c", "import pipeline; print(pipeline.__file__)"], tmp_path).strip())
    assert site.is_relative_to(venv) and not site.is_relative_to(REPO)

    team = tmp_path / "team"
    team.mkdir()
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    env.pop("PYTHONPATH", None)
    run(["git", "init", "-q"], team, env)
    out = run([str(venv / "bin" / "trt-pipeline"), "init"], team, env)
    assert "ran dvc init" in out
    params = yaml.safe_load((team / "params.yaml").read_text())
    # the bundled model is the installed package's, tracked where it is installed
    assert Path(params["model"]["source"]).is_relative_to(venv)
    run(["git", "add", "-A"], team, env)
    run(["git", "commit", "-qm", "init"], team, env)
    out = run([str(py), "-m", "dvc", "repro"], team, env)
    assert "Traceback" not in out
    (engine,) = (team / "artifacts" / "build").glob("*/engine.plan")
    assert engine.stat().st_size > 0
    assert (team / "artifacts" / "inspect" / "report.html").is_file()
    summary = json.loads((team / "metrics" / "summary.json").read_text())
    assert summary  # the benchmark stage ran to its end
    # nothing of this checkout was needed: every stage ran the installed package
    assert not (team / "stages").exists() and not (team / "pipeline").exists()
    again = run([str(py), "-m", "dvc", "repro"], team, env)
    assert "Running stage 'export'" not in again  # up to date: only fingerprint runs
