"""docs/tutorials/detector-and-ocr.md's detector (sections 1-3), run as written in a fresh copy
of the repository: a module of its own, so the long tutorials run side by side; its recognizer
is tests/e2e/test_tutorials_ocr.py's."""

from __future__ import annotations

import json

import pytest

from tests.e2e.tutorial_pages import blocks, offline_wheels, save_files, sh

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_detector_tutorial(tutorial_repo, monkeypatch):
    """docs/tutorials/detector-and-ocr.md's detector (sections 1-3); its recognizer
    (sections 4-6) is tests/e2e/test_tutorials_ocr.py's, so the two run side by side."""
    repo = tutorial_repo
    offline_wheels(monkeypatch, ("rapidocr-onnxruntime", "1.4.4"), ("nudenet", "3.4.2"))
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(repo.parent / "engines"))
    assert save_files("detector-and-ocr.md", repo) == ["make_data.py", "ocr/metrics.py"]
    fetched, make, yolo32, yolo16, yolo8, *_ = blocks("detector-and-ocr.md")
    sh(repo, fetched)
    sh(repo, make)

    def accuracy() -> dict:
        return json.loads((repo / "metrics/accuracy.json").read_text())

    sh(repo, yolo32)
    assert accuracy()["gate_passed"] and accuracy()["accuracy"]["output0"]["task"] == "detection"
    assert list((repo / "artifacts/build").glob("*/engine.plan"))
    sh(repo, yolo16)
    assert accuracy()["gate_passed"] and accuracy()["precision"] == "fp16"
    ran = sh(repo, yolo8)
    metrics = accuracy()
    assert metrics["gate_passed"] and metrics["precision"] == "int8"
    fb = metrics.get("fallback") or {}
    if fb.get("needed"):  # at least half of the convolutions stay int8
        assert 2 * fb["gemms_still_quantized"] >= fb["quantized_gemms"], fb
        assert metrics["holdout"]["verdict_samples"] == 8 and "search" in metrics
    said = " ".join((ran.stdout + ran.stderr).split())
    assert "x the fp16 engine (" in said  # the build table stands int8 against fp16 and fp32
