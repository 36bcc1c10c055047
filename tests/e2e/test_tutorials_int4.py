"""The int4 and streamed-transform tutorials in docs/tutorials/, run as written, as
test_tutorials_precision.py runs the int8, precision=auto and Hugging Face ones: a module of
their own, so the long tutorials run side by side (tests/e2e/tutorial_pages.py reads the
pages)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.tutorial_pages import commands
from tests.helpers import dvc

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_int4_transformer_tutorial(tutorial_repo, monkeypatch):
    repo = tutorial_repo
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(repo.parent / "engines"))
    rtn, rtn_fallback, awq, show = commands("int4-transformer.md")
    assert all(c[0] == "dvc" for c in (rtn, rtn_fallback, awq, show))

    def accuracy() -> dict:
        return json.loads((repo / "metrics/accuracy.json").read_text())

    failed = dvc(repo, *rtn[1:], check=False)
    assert failed.returncode != 0
    assert "accuracy gate failed for int4_rtn ONNX: cosine of output 'embedding'" in failed.stderr
    assert not accuracy()["gate_passed"] and accuracy()["precision"] == "int4_rtn"

    dvc(repo, *rtn_fallback[1:])
    calibration = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    assert calibration["gate_passed"] and calibration["fallback"]["needed"]
    assert calibration["calibration"]["int4"]["int4_weight_share"] >= 0.75

    dvc(repo, *awq[1:])
    calibration = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    assert calibration["gate_passed"] and calibration["activations"]["type"] == "fp16"
    assert calibration["calibration"]["int4"]["int4_weight_share"] == 1.0
    assert list((repo / "artifacts/build").glob("*/engine.plan"))
    report = (repo / "artifacts/inspect/report.md").read_text()
    assert (
        "- int4 weight-only (awq_clip, blocks of 128): 9 GEMMs read int4 weights, 100.0%" in report
    )
    assert "int4_awq" in dvc(repo, *show[1:]).stdout


def test_streamed_transforms_tutorial(tutorial_repo):
    repo = tutorial_repo
    streamed, modelopt, placement, show = commands("streamed-transforms.md")
    assert all(c[:2] == ["dvc", "exp"] for c in (streamed, modelopt, placement, show))

    def outcome() -> tuple[str, dict]:
        calibration = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
        assert calibration["gate_passed"]
        accuracy = json.loads((repo / "metrics/accuracy.json").read_text())
        return calibration["calibration"]["calibrated_by"], accuracy["accuracy"]

    dvc(repo, *streamed[1:])
    by, figures = outcome()
    assert by == "streamed entropy calibration (ModelOpt's scales, one weight at a time)"
    dvc(repo, *modelopt[1:])
    assert outcome() == ("modelopt", figures)

    failed = dvc(repo, *placement[1:], check=False)
    assert failed.returncode != 0
    assert (
        "error: calibration.streaming=always cannot stream precision.qdq_placement=modelopt ("
        in failed.stderr
    )
    assert "streaming" in dvc(repo, *show[1:]).stdout
