"""docs/tutorials/detector-and-ocr.md's recognizer (sections 4-6), run as written in a fresh
copy of the repository: judged by what it reads, int8 whose verdict on held-out lines fails
and then holds with a larger margin, and a type per layer by what the engine costs. Its
detector is tests/e2e/test_tutorials_detector.py's (a module of its own: the two run side by side)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.tutorial_pages import blocks, blocks_lines, offline_wheels, save_files, sh

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_ocr_tutorial(tutorial_repo, monkeypatch):
    repo = tutorial_repo
    offline_wheels(monkeypatch, ("rapidocr-onnxruntime", "1.4.4"), ("nudenet", "3.4.2"))
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(repo.parent / "engines"))
    assert save_files("detector-and-ocr.md", repo) == ["make_data.py", "ocr/metrics.py"]
    fetched, make, _, _, _, ocr, margin_ocr, auto_ocr, show = blocks("detector-and-ocr.md")
    sh(repo, fetched)
    sh(repo, make)

    def accuracy() -> dict:
        return json.loads((repo / "metrics/accuracy.json").read_text())

    fp32_ocr, int8_ocr = blocks_lines(ocr)
    sh(repo, fp32_ocr)
    assert accuracy()["gate_passed"]
    # paddle2onnx names the batch p2o.DynamicDimension.0: the benchmark counts samples at
    # the profile's opt batch of 4 and sweeps its min, opt and max batch
    bench = json.loads((repo / "metrics/benchmark.json").read_text())
    ort = bench["results"]["onnxruntime"]
    assert bench["headline"] == "batch4" and ort["batch"] == 4, bench["headline"]
    assert ort["throughput_per_s"] == pytest.approx(4 * 1000 / ort["mean_ms"], rel=0.05)
    assert set(bench["by_shape"]) == {"batch1", "batch4", "batch8"}
    # the choice holds on its own lines and misses on the ones held out: one line says so
    failed = sh(repo, int8_ocr, check=False)
    line = " ".join(failed.stderr.split())
    assert failed.returncode != 0 and "accuracy gate failed for int8 ONNX" in line, line
    assert "samples the search never judged" in line and "precision.search_margin" in line
    missed = accuracy()
    assert missed["search"]["ocr.metrics:cer_increase"]["metric"]["passed"]
    assert not missed["gate"]["ocr.metrics:cer_increase"]["metric"]["passed"]
    sh(repo, margin_ocr)
    metrics = accuracy()
    assert metrics["gate_passed"], metrics["failing"]
    # the search under the larger margin judged from the figures the first one measured
    fallback = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())["fallback"]
    assert fallback["figures_reused"] > fallback["graphs_evaluated"] // 2, fallback
    assert metrics["gate"]["ocr.metrics:cer_increase"]["metric"]["passed"]
    assert metrics["holdout"]["verdict_samples"] >= 8
    sh(repo, auto_ocr)
    assert accuracy()["gate_passed"], accuracy()["failing"]
    mixed = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())["mixed"]
    kinds = {(row["op_type"], row["type"]) for row in mixed["assignment"]}
    assert ("MatMul", "int4") in kinds and ("Conv", "int8") in kinds, kinds
    # a mix, so every single-type graph is listed beside it: fewer bytes than any that passes
    singles = [g for g in mixed["graphs"] if g["graph"].startswith("all ") and g["passed"]]
    assert mixed["weight_bytes"] < min(g["weight_bytes"] for g in singles), mixed["graphs"]
    # by what the engine costs: no larger than the fp16 engine, as predicted from builds
    assert mixed["engine"]["vs_fp16"] <= 1.0 and mixed["engine"]["prediction_held"]
    shown = sh(repo, show).stdout
    assert "int8" in shown and "auto" in shown
