"""docs/tutorials/ocr-service.md run as written: three wheel models (RapidOCR's PP-OCRv4
detector and recognizer, its angle classifier) in one project of several models (begun
with one, then `add-model`), one
`dvc repro` for all, an edit to one model that reruns that model's stages only, and their
Triton repository checked with the tritonclient wheel's schema."""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e.tutorial_pages import blocks, blocks_lines, offline_wheels, save_files, sh

pytestmark = pytest.mark.e2e
MODELS = ("det", "cls", "rec")


@pytest.mark.slow
def test_ocr_service_tutorial(tmp_path, monkeypatch):
    offline_wheels(monkeypatch, ("rapidocr-onnxruntime", "1.4.4"), ("tritonclient", "2.73.0"))
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "engines"))
    page = "ocr-service.md"
    setup, make, shared, repro, index, edit, checked = blocks(page)
    sh(tmp_path, setup)
    # one model, then add-model twice: a project of several, as init with three makes it
    config = (tmp_path / "ocr-service/conf/config.yaml").read_text()
    assert "  - models: [det, cls, rec]\n" in config and "override model:" not in config
    assert sorted(p.name for p in (tmp_path / "ocr-service/conf/models").iterdir()) == [
        f"{m}.yaml" for m in sorted(MODELS)
    ]
    assert save_files(page, tmp_path) == [
        "ocr-service/make_data.py",
        *[f"ocr-service/conf/models/{m}.yaml" for m in MODELS],
    ]
    service = tmp_path / "ocr-service"
    sh(tmp_path, make)
    sh(tmp_path, shared)
    sh(tmp_path, repro)
    for m in MODELS:
        accuracy = json.loads((service / "metrics" / m / "accuracy.json").read_text())
        assert accuracy["gate_passed"] and accuracy["model"] == m
        assert list((service / "artifacts" / m / "build").glob("*/engine.plan"))
        assert (service / "repository" / m / "config.pbtxt").is_file()
    table = sh(tmp_path, index).stdout
    assert all(re.search(rf"^\| {m} \| fp32 \|", table, re.M) for m in MODELS), table
    commit, status, again = blocks_lines(edit)
    sh(tmp_path, commit)
    changed = re.findall(r"^(\S+):$", sh(tmp_path, status).stdout, re.M)
    assert sorted(c for c in changed if not c.endswith("fingerprint")) == [
        "benchmark@cls",
        "build@cls",
        "calibrate@cls",
    ], changed
    plans = {m: _plan_mtimes(service, m) for m in ("det", "rec")}
    sh(tmp_path, again)
    assert {m: _plan_mtimes(service, m) for m in ("det", "rec")} == plans
    assert json.loads((service / "metrics/cls/accuracy.json").read_text())["precision"] == "fp16"
    assert re.search(r"^\| cls \| fp16 \|", (service / "index/models.md").read_text(), re.M)
    after = re.findall(r"^(\S+):$", sh(tmp_path, "cd ocr-service && dvc status").stdout, re.M)
    assert after == ["machine/dvc.yaml:fingerprint"], after  # always runs; the rest current
    done = sh(tmp_path, checked)
    out = done.stdout + done.stderr
    assert out.count("parsed with Triton's ModelConfig (tritonclient)") == 3, out
    configs = {m: (service / "checked" / m / "config.pbtxt").read_text() for m in MODELS}
    assert "max_batch_size: 8" in configs["cls"] and "max_batch_size: 8" in configs["rec"]
    assert "max_batch_size: 1" in configs["det"]


def _plan_mtimes(service, model: str) -> dict[str, int]:
    """Each fingerprint's engine.plan of `model` and when it was written: unchanged when
    nothing rebuilt it."""
    return {
        p.parent.name: p.stat().st_mtime_ns
        for p in (service / "artifacts" / model / "build").glob("*/engine.plan")
    }
