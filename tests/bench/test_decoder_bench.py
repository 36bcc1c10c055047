"""A decoder's benchmark (issue 40, item 4): time to first token by prompt length, time
per output token by past length, each in its own profile, and the KV cache's bytes. The
plan and the cache's size from a decoder's inputs alone; the timing on ONNX Runtime runs in
the decoder tutorial's test (tests/e2e/test_tutorials_decoder.py), and on a TensorRT
engine below where a GPU runs it."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.bench import decoder_bench
from pipeline.core.config import DecoderBench, DecoderProfile
from pipeline.core.errors import PipelineError
from pipeline.graph.onnx_model import TensorSpec
from pipeline.inputs import decoder_profiles, decoder_runs

LAYERS, HEADS, HEAD_DIM = 2, 4, 16
SPECS = [
    TensorSpec("input_ids", "int64", ("batch", "seq")),
    TensorSpec("attention_mask", "int64", ("batch", "total")),
    *[
        TensorSpec(f"past_key_values.{i}.{kv}", "float16", ("batch", HEADS, "past", HEAD_DIM))
        for i in range(LAYERS)
        for kv in ("key", "value")
    ],
]
PROFILES = decoder_profiles.profiles(DecoderProfile(4, 16, 64), SPECS)


def test_the_lengths_default_to_each_phases_profile():
    plan = decoder_bench.plan(DecoderBench(), PROFILES)
    assert plan.input_lens == [1, 8, 16]  # the prefill profile's prompt: min, opt, max
    assert plan.past_lens == [1, 32, 63]  # the decode profile's past
    given = decoder_bench.plan(DecoderBench(input_lens=[128, 4], past_lens=[7], batch=2), PROFILES)
    assert (given.input_lens, given.past_lens, given.batch) == ([4, 128], [7], 2)


def test_bad_lengths_are_one_line():
    with pytest.raises(PipelineError, match="lengths and batch must be at least 1"):
        decoder_bench.plan(DecoderBench(past_lens=[0]), PROFILES)


def test_the_kv_cache_is_counted_per_token_and_at_the_profiles_largest():
    kv = decoder_bench.kv_cache(SPECS, PROFILES)
    per_token = LAYERS * 2 * HEADS * HEAD_DIM * 2  # fp16
    assert kv == {
        "tensors": 4,
        "bytes_per_token": per_token,
        "max_batch": 4,
        "max_past": 63,
        "bytes_at_max": per_token * 4 * 63,
    }


def test_each_phase_runs_in_its_own_profile():
    """Decode feeds fit the prefill profile as well (seq 1 over a past it allows); they
    run in `decode`, whose opt is tuned for them."""

    class Recorder:
        def __init__(self):
            self.calls = []

        def __call__(self, runner, feeds, profile, label):
            self.calls.append((label, profile, feeds["past_key_values.0.key"].shape[2]))
            return 2.0

    timer = Recorder()
    plan = decoder_bench.Plan(2, [8], [32])
    got = decoder_bench.measure(None, SPECS, PROFILES, plan, timer)
    assert timer.calls == [("prefill 8", 0, 0), ("decode past 32", 1, 32)]
    assert got["prefill_tokens_per_s"] == {"8": 2 * 8 * 1e3 / 2.0}
    assert got["decode_tokens_per_s"] == {"32": 2 * 1e3 / 2.0}


def test_step_feeds_follow_the_roles():
    feeds = decoder_bench.step_feeds(SPECS, 2, 1, 5, np.random.default_rng(0))
    assert feeds["input_ids"].shape == (2, 1)
    assert feeds["attention_mask"].shape == (2, 6)
    assert feeds["past_key_values.1.value"].shape == (2, HEADS, 5, HEAD_DIM)
    assert feeds["past_key_values.1.value"].dtype == np.float16


@pytest.mark.gpu
def test_an_engines_phases_on_the_gpu(tmp_path, monkeypatch):
    """The engine of a transformers GPT-2 with both profiles: TTFT and TPOT from the
    TensorRT runner, each phase in its profile."""
    from pipeline.core.layout import Layout
    from pipeline.flow import stages
    from tests.conftest import compose
    from tests.wild import hf

    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "store"))
    model = hf.gpt2(tmp_path / "gpt2.onnx")
    cfg = compose(
        "model=onnx_file",
        f"model.onnx_path={model}",
        f"model.source={model}",
        "profile.decoder={max_batch: 2, max_input_len: 16, max_seq_len: 64}",
        "precision=fp16",
        "benchmark.min_duration_s=0.2",
    )
    layout = Layout(tmp_path / "run")
    for stage in (stages.fingerprint, stages.export, stages.calibrate, stages.build):
        stage(cfg, layout)
    record = stages.benchmark(cfg, layout)
    phases = record["decoder"]["backends"]["tensorrt"]
    assert set(phases["ttft_ms"]) == {"1", "8", "16"} and min(phases["tpot_ms"].values()) > 0


def test_a_cache_the_phases_cannot_feed_is_said_not_guessed():
    """An input of no known role (optimum's use_cache_branch flag) stops the phases' timing
    with the reason, in benchmark.md; summary.json gains no decoder columns."""
    from pipeline.report.benchmark import benchmark_report, headline

    flag = TensorSpec("use_cache_branch", "bool", (1,))
    reason = decoder_runs.unfeedable([*SPECS, flag])
    assert "input 'use_cache_branch' is none of" in reason
    assert decoder_runs.unfeedable(SPECS) is None
    skipped = {"skipped": f"the decoder's phases are not timed: {reason}"}
    assert headline._decoder(skipped) == {}
    lines = benchmark_report._decoder_lines(skipped)
    assert lines[0] == "## A decoder's phases" and "use_cache_branch" in lines[2]


def test_token_ids_are_drawn_below_the_vocabulary():
    """model.int_high (100) is more than a small decoder's vocabulary: random token ids are
    drawn below the logits' last dim, in the phases and the benchmark's own inputs alike."""
    from pipeline.bench.benchmark import bench_inputs
    from pipeline.core.config import ModelConfig

    logits = TensorSpec("logits", "float32", ("batch", "seq", 41))
    assert decoder_bench.vocabulary([logits]) == 41
    assert decoder_bench.vocabulary([TensorSpec("logits", "float32", ("b", "s", "v"))]) is None
    feeds = decoder_bench.step_feeds(SPECS, 4, 64, 0, np.random.default_rng(0), 7)
    assert feeds["input_ids"].max() < 7
    model = ModelConfig(factory=None, onnx_path="m.onnx")
    shapes = {"input_ids": [2, 16], "attention_mask": [2, 16]}
    drawn = bench_inputs(model, SPECS[:2], shapes, seed=0, vocabulary=7)
    assert drawn["input_ids"].max() < 7 and drawn["input_ids"].max() >= 1
