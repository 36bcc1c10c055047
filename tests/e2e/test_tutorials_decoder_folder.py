"""docs/tutorials/decoder-folder.md run as written: an optimum-shaped folder (a Llama with
GQA, RoPE and tied embeddings exported by `transformers` with its cache, config.json,
tokenizer.json) through every stage with `model=hf_decoder` and no path but the folder's;
the tied head stored once and the engine's bytes per parameter in summary.json. Then the
same checkpoint as ONNX Runtime GenAI's model builder writes it (GroupQueryAttention and
fused RMS norms, ONNX Runtime's contrib ops) through every stage, its fp16 engine built
by TensorRT-RTX and judged against ONNX Runtime's own kernels."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.e2e.tutorial_pages import blocks, page, save_files, sh

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_decoder_folder_tutorial(tutorial_repo, monkeypatch):
    repo = tutorial_repo
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(repo.parent / "engines"))
    assert save_files("decoder-folder.md", repo) == ["make_folder.py"]
    make, run, read, genai = blocks("decoder-folder.md")
    sh(repo, make)
    ran = sh(repo, run)
    assert "per parameter" in ran.stdout + ran.stderr
    params = yaml.safe_load((repo / "params.yaml").read_text())
    assert params["model"]["folder"] == "llm" and params["model"]["source"] == "llm"
    export = json.loads((repo / "artifacts/export/export.json").read_text())
    tied = [line for line in export["normalized"] if line.startswith("tied weights stored once")]
    assert len(tied) == 1 and "is the transpose of m.model.embed_tokens.weight" in tied[0]
    assert export["reference"]["batches"]["prefill"] == 6
    [manifest] = (repo / "artifacts/build").glob("*/manifest.json")
    profiles = json.loads(manifest.read_text())["config"]["profiles"]
    # config.json's max_position_embeddings (64) as max_seq_len, half of it for a prompt
    decode = profiles[1]["inputs"]["past_key_values.0.key"]
    assert [p["name"] for p in profiles] == ["prefill", "decode"] and decode["max"][2] == 63
    summary = json.loads((repo / "metrics/summary.json").read_text())
    assert summary["bytes_per_parameter"] > 2.0 and summary["engine_vs_ideal"] > 1.0
    printed = sh(repo, read).stdout.split()
    assert float(printed[0]) == summary["bytes_per_parameter"]
    _genai_folder_through_every_stage(repo, genai)


def _genai_folder_through_every_stage(repo, block):
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai has no wheel here")
    ran = sh(repo, block)
    assert "hf_decoder fp16 done" in ran.stdout + ran.stderr
    [run_dir] = (repo / "outputs").glob("*/*")
    export = json.loads((run_dir / "artifacts/export/export.json").read_text())
    # the page quotes the line export.json writes
    quoted = re.search(r"^\d+ ONNX Runtime contrib ops .*$", page("decoder-folder.md"), re.M)
    assert quoted and quoted.group(0) in export["normalized"]
    cache = next(i for i in export["inputs"] if i["name"] == "past_key_values.0.key")
    assert cache["dims"][1:] == [2, "past_sequence_length", 32]  # kv_cache_dim fixed
    accuracy = json.loads((run_dir / "metrics/accuracy.json").read_text())
    assert accuracy["gate_passed"] is True
    assert list(run_dir.glob("artifacts/build/*/engine.plan")), "no engine written"
    # TensorRT-RTX runs each layer's rewritten attention as its fused self-attention
    report = json.loads((run_dir / "artifacts/inspect/report.json").read_text())
    assert report["fusion"]["attention"] == {"softmax": 2, "fused": 2, "unfused": []}
