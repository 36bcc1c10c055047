"""The wheel as a team installs it: built from the working tree, installed (not editable)
in a fresh virtualenv, `trt-pipeline init` in an empty git repository, then `dvc repro`
there on the CPU with the default toy model.

The virtualenv sees the packages of the interpreter running the suite (a .pth file adds its
site directories: the base interpreter's, or those of the virtualenv the suite runs in, which
--system-site-packages would miss) so that torch and the rest are not downloaded again; pip
still resolves the wheel's ranges against them (offline: a range the installed versions miss
fails the install), and the test checks that `pipeline` is imported from the virtualenv, not
from this checkout."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.utils import canonicalize_name

from tests.conftest import REPO, git_env

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
        "pipeline/cli/init/files/dvc.yaml.in",
        "pipeline/report/templates/report.html.j2",
    ):
        assert needed in names, needed


def suite_site_dirs() -> list[str]:
    """The site directories this interpreter has on sys.path, in its order (user site
    first, as site.main adds them): a virtualenv's own, and its base interpreter's only
    where it sees them itself."""
    dirs = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    return [d for d in [*dirs, *site.getsitepackages()] if Path(d).is_dir()]


def install_in_fresh_venv(wheel: Path, tmp_path: Path, *pinned: str) -> Path:
    """A virtualenv seeing this interpreter's packages, the wheel installed into it (not
    editable), and `pinned` requirements from the package index over what it sees."""
    venv = tmp_path / "venv"
    # No pip of its own: the interpreter's pip and setuptools (seen through the .pth below)
    # install into it, so the venv's bundled old setuptools shadows nothing. Not
    # --system-site-packages: from a virtualenv, that shows the base interpreter's
    # packages, not this one's.
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    py = venv / "bin" / "python"
    purelib = subprocess.check_output(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
    )
    # addsitedir, not bare paths: their own .pth files (editable installs, namespace
    # packages) run as they do here; appended after the venv's site-packages, so what is
    # installed into the venv comes first.
    adds = "; ".join(f"site.addsitedir({d!r})" for d in suite_site_dirs())
    (Path(purelib.strip()) / "_suite_site_packages.pth").write_text(f"import site; {adds}\n")
    run([str(py), "-m", "pip", "install", "--no-index", "-q", f"{wheel}[rtx]"], tmp_path)
    if pinned:
        run([str(py), "-m", "pip", "install", "-q", "--no-deps", *pinned], tmp_path)
        _wheel_ranges_hold(py, tmp_path)
    module = Path(
        run([str(py), "-c", "import pipeline; print(pipeline.__file__)"], tmp_path).strip()
    )
    assert module.is_relative_to(venv) and not module.is_relative_to(REPO)
    return venv


def _test_only() -> set[str]:
    """The suite's own tools (pyproject's test extra): the virtualenv sees them through the
    .pth file, but a user's install of the wheel holds none of them."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    test = {Requirement(r).name for r in project["optional-dependencies"]["test"]}
    runtime = {Requirement(r).name for r in project["dependencies"]}
    return {canonicalize_name(n) for n in test - runtime}


def _wheel_ranges_hold(py: Path, cwd: Path) -> None:
    """pip check with the pinned versions in place, but for what only the suite's tools
    require (onnxruntime-genai 0.18 wants onnxruntime >= 1.31; the wheel takes 1.24)."""
    r = subprocess.run([str(py), "-m", "pip", "check"], cwd=cwd, capture_output=True, text=True)
    if r.returncode == 0:
        return
    test_only = _test_only()
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    broken = [line for line in lines if canonicalize_name(line.split()[0]) not in test_only]
    assert lines and not broken, r.stdout + r.stderr


def team_repo(venv: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An empty git repository with `trt-pipeline init` run and committed in it."""
    team = tmp_path / "team"
    team.mkdir()
    env = git_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYTHONPATH", None)
    run(["git", "init", "-q"], team, env)
    out = run([str(venv / "bin" / "trt-pipeline"), "init"], team, env)
    assert "ran dvc init" in out
    run(["git", "add", "-A"], team, env)
    run(["git", "commit", "-qm", "init"], team, env)
    return team, env


def test_init_and_dvc_repro_from_the_installed_wheel(wheel, tmp_path):
    venv = install_in_fresh_venv(wheel, tmp_path)
    py = venv / "bin" / "python"
    team, env = team_repo(venv, tmp_path)
    params = yaml.safe_load((team / "params.yaml").read_text())
    # the bundled model is the installed package's, tracked where it is installed
    assert Path(params["model"]["source"]).is_relative_to(venv)
    out = run([str(py), "-m", "dvc", "repro"], team, env)
    assert "Traceback" not in out and "WARNING" not in out, out[-3000:]
    (engine,) = (team / "artifacts" / "build").glob("*/engine.plan")
    assert engine.stat().st_size > 0
    assert (team / "artifacts" / "inspect" / "report.html").is_file()
    summary = json.loads((team / "metrics" / "summary.json").read_text())
    assert summary  # the benchmark stage ran to its end
    # nothing of this checkout was needed: every stage ran the installed package
    assert not (team / "stages").exists() and not (team / "pipeline").exists()
    again = run([str(py), "-m", "dvc", "repro"], team, env)
    assert "Running stage 'export'" not in again  # up to date: only fingerprint runs


# The ends of pyproject's onnx and onnxruntime ranges (requirements.lock holds a version
# between them). torch is tested at the lock's version only: the other torch builds on the
# index are CUDA builds of several GB (see docs/init.md).
ENDS = {
    "oldest": ("onnx==1.21.0", "onnxruntime==1.24.4"),
    "newest": ("onnx==1.23.2", "onnxruntime==1.32.0"),
}


@pytest.mark.parametrize("end", sorted(ENDS))
def test_int8_through_every_stage_at_the_ends_of_the_onnx_ranges(wheel, tmp_path, end):
    venv = install_in_fresh_venv(wheel, tmp_path, *ENDS[end])
    py = venv / "bin" / "python"
    versions = run([str(py), "-c", VERSIONS], tmp_path).split()
    assert versions == [v.split("==")[1] for v in ENDS[end]], versions
    team, env = team_repo(venv, tmp_path)
    # caches of its own, so each end runs ModelOpt and the build, not the other end's hits
    env["TRT_PIPELINE_CALIB_CACHE"] = str(tmp_path / "calibration")
    env["TRT_PIPELINE_STORE"] = str(tmp_path / "engines")
    # int8 takes ModelOpt's Q/DQ and ONNX Runtime's calibration; fp16 AutoCast rides on
    # the same onnx and ONNX Runtime calls, checked by the benchmark's comparison.
    run([str(venv / "bin" / "trt-pipeline"), "params", "precision=int8"], team, env)
    out = run([str(py), "-m", "dvc", "repro"], team, env)
    assert "Traceback" not in out and "engine store miss, built" in out, out[-3000:]
    calibration = json.loads((team / "artifacts/calibrate/calibration.json").read_text())
    assert calibration["precision"] == "int8" and calibration["gate_passed"], calibration
    (engine,) = (team / "artifacts" / "build").glob("*/engine.plan")
    assert engine.stat().st_size > 0
    assert json.loads((team / "metrics" / "summary.json").read_text())


VERSIONS = "import onnx, onnxruntime; print(onnx.__version__, onnxruntime.__version__)"
