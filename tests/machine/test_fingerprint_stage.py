"""The always-run fingerprint stage: it reads only the build settings it needs, by the
schema's rules, and leaves an unchanged fingerprint.json untouched (a no-op `dvc repro`)."""

import dataclasses
import subprocess
import sys

import pytest
import yaml

from pipeline.cli import params_file
from pipeline.core import config
from pipeline.core.config import BuildConfig
from pipeline.core.errors import PipelineError
from pipeline.machine import build_settings, fingerprint
from tests.conftest import REPO


def test_defaults_are_the_schemas():
    schema = BuildConfig()
    for f in dataclasses.fields(build_settings.BuildSettings):
        want = getattr(schema, f.name)
        assert getattr(build_settings.BuildSettings(), f.name) == (
            tuple(want) if isinstance(want, list) else want
        )


def _params(tmp_path, build, written="by hand"):
    """params.yaml with `build` changed: as `trt-pipeline params` writes it (JSON), or as
    block YAML (by hand, or `dvc exp run -S`)."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["build"].update(build)
    path = tmp_path / "params.yaml"
    path.write_text(params_file.text(raw) if written == "by params" else yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("written", ["by params", "by hand"])
@pytest.mark.parametrize(
    "build",
    [
        {"backend": "tensorrt_llm"},
        {"hardware_compatibility": "turing"},
        {"version_compatible": "maybe"},
        {"compute_capabilities": "SM86"},
        {"compute_capabilities": [None]},
    ],
)
def test_a_bad_build_setting_is_refused_as_the_full_schema_refuses_it(tmp_path, build, written):
    path = _params(tmp_path, build, written)
    with pytest.raises(PipelineError, match="invalid config"):
        config.load(path)
    with pytest.raises(PipelineError, match=f"invalid config: build.{next(iter(build))}"):
        build_settings.load(path)


def test_the_settings_give_the_fingerprint_the_full_config_gives(tmp_path, monkeypatch):
    none = tmp_path / "none.json"
    none.write_text("null")
    monkeypatch.setenv("TRT_PIPELINE_GPU_PROBE", str(none))
    path = _params(tmp_path, {"backend": "tensorrt_rtx", "compute_capabilities": ["SM89", 86]})
    lean, full = build_settings.load(path).build, config.load(path).build
    assert lean.compute_capabilities == ("SM89", "86") and list(full.compute_capabilities) == [
        "SM89",
        "86",
    ]
    one, other = fingerprint.collect(lean), fingerprint.collect(full)
    assert fingerprint.identity(one) == fingerprint.identity(other) and one["id"] == other["id"]


@pytest.mark.parametrize(
    "text, why",
    [
        ("build: [1, 2]\n", "build must be a mapping"),
        ("build: {backend: [\n", "not valid YAML"),
        ("- a\n", "not a mapping"),
    ],
)
def test_a_broken_params_file_is_one_line(tmp_path, text, why):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(PipelineError, match=why):
        build_settings.load(path)
    with pytest.raises(PipelineError, match="config not found"):
        build_settings.load(tmp_path / "nowhere.yaml")


def test_the_stage_skips_omegaconf_and_leaves_an_unchanged_fingerprint_alone(in_tmp_repo_copy):
    # The stage ends in sys.exit: what it imported is read at exit.
    probe = (
        "import atexit, runpy, sys; atexit.register(lambda: print('omegaconf' in sys.modules, "
        "'yaml' in sys.modules)); "
        "sys.argv = ['stages.fingerprint']; runpy.run_module('stages.fingerprint', run_name='__main__')"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe], cwd=in_tmp_repo_copy, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    # params.yaml as `trt-pipeline params` writes it (JSON) is read without a YAML parser
    assert r.stdout.strip() == "False False"
    out = in_tmp_repo_copy / "artifacts" / "fingerprint.json"
    before = out.stat()
    subprocess.run(
        [sys.executable, "-m", "stages.fingerprint"],
        cwd=in_tmp_repo_copy,
        check=True,
        capture_output=True,
    )
    after = out.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    # A changed machine (here: another backend setting's target) rewrites it.
    params = in_tmp_repo_copy / "params.yaml"
    raw = yaml.safe_load(params.read_text())
    raw["build"]["compute_capabilities"] = ["SM120"]
    params.write_text(yaml.safe_dump(raw))
    subprocess.run(
        [sys.executable, "-m", "stages.fingerprint"],
        cwd=in_tmp_repo_copy,
        check=True,
        capture_output=True,
    )
    assert out.stat().st_ino != before.st_ino and "SM120" in out.read_text()


def test_a_bad_setting_stops_the_stage_with_one_line(in_tmp_repo_copy):
    params = in_tmp_repo_copy / "params.yaml"
    raw = yaml.safe_load(params.read_text())
    raw["build"]["backend"] = "trt"
    params.write_text(yaml.safe_dump(raw))
    r = subprocess.run(
        [sys.executable, "-m", "stages.fingerprint"],
        cwd=in_tmp_repo_copy,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: invalid config: build.backend='trt'; expected one of auto, tensorrt, tensorrt_rtx"
    ]
