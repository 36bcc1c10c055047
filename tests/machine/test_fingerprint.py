import json
import subprocess
import sys

import pytest

from pipeline.core.config import BuildConfig
from pipeline.core.errors import PipelineError
from pipeline.machine import fingerprint
from tests.conftest import REPO


def test_no_gpu_fingerprint_is_explicit(monkeypatch, tmp_path):
    none = tmp_path / "none.json"
    none.write_text("null")
    monkeypatch.setenv("TRT_PIPELINE_GPU_PROBE", str(none))
    fp = fingerprint.collect(BuildConfig())
    assert fp["gpu"] is None and fp["target"] == fingerprint.NO_GPU_TARGET
    assert fp["trt_flavour"] == "tensorrt_rtx" and fp["trt_version"].count(".") == 3
    assert fp["id"].startswith("nogpu-rtx")


def test_gpu_probe_override_changes_the_id_but_not_gpu_count(monkeypatch, tmp_path):
    gpu = {
        "name": "NVIDIA L4",
        "compute_capability": "8.9",
        "memory_mib": 23034,
        "_driver": "580.1",
        "_cuda_driver": "13.0",
    }
    f = tmp_path / "gpu.json"
    f.write_text(json.dumps(gpu))
    monkeypatch.setenv("TRT_PIPELINE_GPU_PROBE", str(f))
    one = fingerprint.collect(BuildConfig())
    assert one["gpu"]["name"] == "NVIDIA L4" and one["driver_version"] == "580.1"
    assert one["id"].startswith("nvidia-l4-sm8.9-drv580.1-")
    f.write_text(json.dumps({**gpu, "count": 8}))
    assert fingerprint.collect(BuildConfig())["id"] == one["id"]
    f.write_text(json.dumps({**gpu, "_driver": "580.2"}))
    assert fingerprint.collect(BuildConfig())["id"] != one["id"]


def test_backend_choice():
    assert fingerprint.choose_flavour("auto", None)[0] == "tensorrt_rtx"
    if fingerprint.trt_installed("tensorrt") is None:
        with pytest.raises(PipelineError, match=r"\.\[tensorrt\]"):
            fingerprint.choose_flavour("tensorrt", None)


def test_cli_prints_fingerprint():
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "fingerprint", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    fp = json.loads(r.stdout)
    assert fp["id"] == fingerprint.fingerprint_id(fp)


@pytest.mark.gpu
def test_nvml_fingerprint_on_a_real_gpu():
    gpu, source = fingerprint.probe_gpu()
    assert source == "NVML"
    assert gpu["name"].startswith("NVIDIA") and gpu["memory_mib"] > 1000
    major, _minor = gpu["compute_capability"].split(".")
    assert int(major) >= 5
    fp = fingerprint.collect(BuildConfig(), require_trt=False)
    assert fp["driver_version"] and fp["cuda_driver_version"]
    assert fp["id"].startswith("nvidia-") and "none" not in fp["id"]
