"""A decoder's two profiles by named dims, the prefill one with an empty past (issue 40's
first refusal: `dims` refused a past of 0 that `shapes` took): a GPT-2 exported by
`transformers` with its KV cache goes through export, calibrate and a TensorRT-RTX build
with both profiles in the engine."""

from __future__ import annotations

import pytest

from pipeline.core.layout import Layout
from pipeline.flow import stages
from tests.conftest import compose
from tests.wild import hf

PROFILES = (
    "profile.profiles=["
    "{name: prefill, dims: {batch: [1, 1, 2], seq: [1, 8, 16], past_seq: [0, 0, 15],"
    " total_seq: [1, 8, 31]}},"
    " {name: decode, dims: {batch: [1, 1, 2], seq: [1, 1, 1], past_seq: [1, 8, 15],"
    " total_seq: [2, 9, 16]}}]"
)


def built_profiles(tmp_path, monkeypatch, profiles: str) -> list[dict]:
    """A transformers GPT-2 with its KV cache through export, calibrate (its gate passed) and
    a TensorRT-RTX build with `profiles` (an override); the engine's resolved profiles."""
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "store"))
    model = hf.gpt2(tmp_path / "gpt2.onnx")
    cfg = compose(
        "model=onnx_file",
        f"model.onnx_path={model}",
        f"model.source={model}",
        profiles,
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = Layout(tmp_path / "run")
    stages.fingerprint(cfg, layout)
    stages.export(cfg, layout)
    assert stages.calibrate(cfg, layout)["gate_passed"]
    return stages.build(cfg, layout, progress=False)["config"]["profiles"]


@pytest.mark.slow
def test_prefill_with_an_empty_past_and_decode_build_into_one_engine(tmp_path, monkeypatch):
    prefill, decode = built_profiles(tmp_path, monkeypatch, PROFILES)
    assert (prefill["name"], decode["name"]) == ("prefill", "decode")
    past = "past_key_values.0.key"
    assert prefill["inputs"][past]["min"][2] == 0 and decode["inputs"][past]["min"][2] == 1
    assert prefill["inputs"]["input_ids"]["opt"] == [1, 8]


@pytest.mark.slow
def test_three_numbers_give_a_decoders_prefill_and_decode_profiles(tmp_path, monkeypatch):
    numbers = "profile.decoder={max_batch: 2, max_input_len: 16, max_seq_len: 64}"
    prefill, decode = built_profiles(tmp_path, monkeypatch, numbers)
    kv, ids, mask = "past_key_values.1.value", "input_ids", "attention_mask"
    assert prefill["inputs"][kv] == {
        "min": [1, 4, 0, 16],
        "opt": [1, 4, 0, 16],
        "max": [2, 4, 48, 16],
    }
    assert prefill["inputs"][ids] == {"min": [1, 1], "opt": [1, 8], "max": [2, 16]}
    assert decode["inputs"][kv] == {
        "min": [1, 4, 1, 16],
        "opt": [1, 4, 32, 16],
        "max": [2, 4, 63, 16],
    }
    assert decode["inputs"][mask] == {"min": [1, 2], "opt": [1, 33], "max": [2, 64]}
    assert decode["inputs"][ids]["max"] == [2, 1]
