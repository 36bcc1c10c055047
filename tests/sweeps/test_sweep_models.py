"""A Hydra sweep over one model of a project of several (sweep.model, and that model's
group options swept as `precision@models.<name>.precision=...`), in a project `trt-pipeline
init` set up with two models."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.helpers import SWEEP_FAST

pytestmark = pytest.mark.e2e


def test_a_sweep_over_one_model_of_two(tmp_path, monkeypatch):
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "store"))
    repo = tmp_path / "two"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    for name in ("a", "b"):
        (repo / f"{name}.onnx").write_bytes((REPO / "pipeline/zoo/onnx/tiny_mlp.onnx").read_bytes())

    def trt(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pipeline", *args], cwd=repo, capture_output=True, text=True
        )

    assert trt("init", "--model", "a.onnx", "--model", "b.onnx").returncode == 0
    r = trt("run", "-m", "sweep.model=b", "precision@models.b.precision=fp32,fp16", *SWEEP_FAST)
    assert r.returncode == 0, r.stderr[-2000:]
    results = [json.loads(p.read_text()) for p in repo.glob("multirun/*/*/*/result.json")]
    assert sorted(r["precision"] for r in results) == ["fp16", "fp32"]
    assert {r["model"] for r in results} == {"b"}
    none = trt("run", "-m", "precision@models.b.precision=fp32,fp16")
    assert none.returncode == 1
    assert "several models (a, b): give the one the sweep builds" in none.stderr
