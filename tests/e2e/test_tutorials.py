"""The tutorials in docs/tutorials/, run as written: every `sh` block's command, in order,
in a fresh copy of the repository, and what each page says it does, checked."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tests.conftest import REPO
from tests.e2e.test_dvc import dvc

pytestmark = pytest.mark.e2e


def commands(page: str) -> list[list[str]]:
    text = (REPO / "docs" / "tutorials" / page).read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)
    return [shlex.split(line) for b in blocks for line in b.strip().splitlines()]


def test_int8_transformer_tutorial(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    plain, fallback, smoothed, show = commands("int8-transformer.md")
    assert all(c[0] == "dvc" for c in (plain, fallback, smoothed, show))

    failed = dvc(repo, *plain[1:], check=False)
    assert failed.returncode != 0
    assert any(
        line.startswith("error: accuracy gate failed for int8 ONNX: ")
        for line in failed.stderr.splitlines()
    ), failed.stderr[-2000:]
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    assert metrics["gate_passed"] is False and metrics["failing"]

    dvc(repo, *fallback[1:])
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    fb = metrics["fallback"]
    assert metrics["gate_passed"] and fb["needed"]
    assert fb["kept_fp32"] and all("/ff2/" in n for n in fb["kept_fp32"])
    report = (repo / "artifacts/inspect/report.md").read_text()
    assert f"({fb['graphs_evaluated']} graphs evaluated)" in report
    assert "group (one role in every layer)" in report and "of GEMM FLOPs run in int8" in report

    dvc(repo, *smoothed[1:])
    calibration = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    assert calibration["gate_passed"] and calibration["fallback"]["needed"] is False
    assert calibration["calibration"]["gemm_flops"]["quantized_fraction"] == 1.0

    shown = dvc(repo, *show[1:])
    assert "precision.smoothing" in shown.stdout
