"""docs/tutorials/decoder.md run as written: a GPT-2 exported by `transformers` with its KV
cache (random weights, outlier channels made), prefill and decode profiles from three
numbers, text prompts through a tokenizer.json, fp16 / int8 / int4_awq judged per phase,
built by TensorRT-RTX with both profiles, and the decoder benchmark on ONNX Runtime."""

from __future__ import annotations

import json

import pytest

from tests.e2e.tutorial_pages import blocks, save_files, sh

pytestmark = pytest.mark.e2e


def _accuracy(repo) -> dict:
    return json.loads((repo / "metrics/accuracy.json").read_text())


@pytest.mark.slow
def test_decoder_tutorial(tutorial_repo, monkeypatch):
    repo = tutorial_repo
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(repo.parent / "engines"))
    assert save_files("decoder.md", repo) == ["export_decoder.py"]
    export, fp16, int8, smoothed, int4_held_out, int4 = blocks("decoder.md")
    sh(repo, export)

    sh(repo, fp16)
    logits = _accuracy(repo)["accuracy"]["logits"]
    assert logits["task"] == "next_token" and logits["top1_agreement"] == 1.0
    assert logits["by_phase"]["decode"]["rows"] == 8 * 8  # 8 prompts, 8 greedy steps each
    assert logits["perplexity_increase"] < 0.01  # fp16's gate on the prompts' perplexity
    export_json = json.loads((repo / "artifacts/export/export.json").read_text())
    assert export_json["reference"]["batches"] == {"prefill": 8, "decode": 64}
    [manifest] = (repo / "artifacts/build").glob("*/manifest.json")
    profiles = json.loads(manifest.read_text())["config"]["profiles"]
    assert [p["name"] for p in profiles] == ["prefill", "decode"]
    assert profiles[0]["inputs"]["past_key_values.3.value"]["min"][2] == 0
    benchmark = json.loads((repo / "metrics/benchmark.json").read_text())
    phases = benchmark["decoder"]["backends"]["onnxruntime"]
    assert set(phases["ttft_ms"]) == {"1", "16", "32"} and set(phases["tpot_ms"]) == {
        "1",
        "32",
        "63",
    }
    assert "## A decoder's phases" in (repo / "metrics/benchmark.md").read_text()
    summary = json.loads((repo / "metrics/summary.json").read_text())
    assert summary["onnxruntime_tpot_ms"] > 0 and summary["kv_cache_mib_at_max"] > 0

    failed = sh(repo, int8, check=False)
    assert failed.returncode != 0
    line = " ".join(failed.stderr.split())
    assert "accuracy gate failed for int8 ONNX: cosine of output 'logits' (next_token)" in line
    assert "more failing (every one in the metrics file)" in line

    sh(repo, smoothed)
    accuracy = _accuracy(repo)
    assert accuracy["gate_passed"] and accuracy["fallback"]["needed"]
    calibration = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    smoothing = calibration["calibration"]["smoothing"]
    assert any("/mlp/c_fc/" in g["matmuls"][0] for g in smoothing["groups"])  # Gemms smoothed
    assert calibration["calibration"]["data"]["source"] == "prompts"

    failed = sh(repo, int4_held_out, check=False)
    assert failed.returncode != 0
    line = next(x for x in failed.stderr.splitlines() if x.startswith("error: accuracy gate"))
    assert "failed for int4_awq ONNX" in line and "samples the search never judged" in line

    sh(repo, int4)
    accuracy = _accuracy(repo)
    assert "re-reads the search's" in accuracy["holdout"]["note"]
    assert accuracy["gate_passed"]
    data = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    used = data["calibration"]["data"]
    assert "every one read" in used["every_shape"] and "one_shape" not in used
    assert used["num_batches"] == 288  # every prompt's prefill and decode steps
    assert list((repo / "artifacts/build").glob("*/engine.plan"))
