"""Greedy generation through a backend (pipeline/bench/generation.py) on a GPT-2 exported by
`transformers` with its KV cache: the reference prompts and the fp32 graph's own tokens
read back from the export's reference, a run through ONNX Runtime that keeps the cache on
the host and repeats the fp32 tokens, a graph whose weights differ that does not, and on a
GPU the engine's run with the cache kept on the device."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from pipeline.bench import generation
from pipeline.bench.ort_runner import OrtRunner
from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.graph import onnx_model
from pipeline.inputs import reference_file
from tests.conftest import FAST_BENCH, compose
from tests.wild import hf

DECODER = "profile.decoder={max_batch: 2, max_input_len: 10, max_seq_len: 16}"
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("generation")
    model = hf.gpt2(tmp / "gpt2.onnx")
    prompts = tmp / "prompts.npy"
    np.save(prompts, np.random.default_rng(3).integers(1, hf.VOCAB, size=(4, 8)))
    cfg = compose(
        "model=onnx_file",
        f"model.onnx_path={model}",
        f"model.source={model}",
        f"model.prompts={prompts}",
        f"model.reference_source={tmp}",
        "model.decode_steps=5",
        DECODER,
        *FAST_BENCH,
    )
    layout = Layout(tmp / "run")
    stages.export(cfg, layout)
    return cfg, layout


def _run(cfg, graph, layout) -> dict:
    from pipeline.engine.build import resolve_profiles

    specs = onnx_model.inputs(onnx_model.load(graph, check=False, weights=False))
    pairs = reference_file.read(layout.export_dir / "reference.npz")
    prompts = generation.reference_prompts(pairs, specs)
    runner = OrtRunner(graph, cfg.benchmark, "cpu", "export")
    try:
        steps = generation.HostSteps(runner, specs, resolve_profiles(cfg.profile, graph))
        runs = [generation.generate(steps, p) for p in prompts]
    finally:
        runner.close()
    return generation.summary(runs, prompts) | {"prompts": prompts}


def test_the_fp32_graph_generates_its_own_tokens_again(exported):
    cfg, layout = exported
    got = _run(cfg, layout.export_dir / "model.onnx", layout)
    # 4 prompts, one a batch (the profile's opt batch): each the prefill's token and 5 steps'
    assert [p.fp32.shape for p in got["prompts"]] == [(1, 6)] * 4
    assert got["runs"] == 4 and got["tokens"] == 24
    assert got["fp32_tokens_agree"] == 1.0 and got["first_difference"] is None
    assert got["ttft_ms"] > 0 and got["tpot_ms"] > 0 and got["tokens_per_s"] > 0


def test_a_graph_whose_weights_differ_is_caught(exported, tmp_path):
    cfg, layout = exported
    model = onnx.load(layout.export_dir / "model.onnx")
    rng = np.random.default_rng(0)
    for i, init in enumerate(model.graph.initializer):
        w = numpy_helper.to_array(init)
        if w.dtype == np.float32 and w.ndim == 2:
            noisy = w + rng.standard_normal(w.shape).astype(np.float32) * w.std()
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(noisy, init.name))
    changed = tmp_path / "changed.onnx"
    onnx.save(model, changed)
    got = _run(cfg, changed, layout)
    assert got["fp32_tokens_agree"] < 0.5 and got["first_difference"] == 0


@pytest.mark.gpu
def test_the_engine_keeps_the_cache_on_the_device_and_repeats_the_host_run(
    exported, requires_trt, tmp_path, monkeypatch
):
    from pipeline.bench.trt_runner import EngineRunner
    from pipeline.engine.build import resolve_profiles
    from pipeline.records import fingerprint_file

    cfg, layout = exported
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "store"))
    stages.fingerprint(cfg, layout)
    stages.calibrate(cfg, layout)
    built = stages.build(cfg, layout, progress=False)
    graph = layout.calibrate_dir / "model.onnx"
    specs = onnx_model.inputs(onnx_model.load(graph, check=False, weights=False))
    profiles = resolve_profiles(cfg.profile, graph)
    prompts = generation.reference_prompts(
        reference_file.read(layout.export_dir / "reference.npz"), specs
    )
    fingerprint = built["fingerprint"]
    plan = layout.engine_dir(fingerprint["id"]) / "engine.plan"
    engine = EngineRunner(plan, fingerprint_file.trt_flavour(fingerprint))
    try:
        device = [generation.generate(engine.generation_steps(specs, profiles), p) for p in prompts]
        host = [
            generation.generate(generation.HostSteps(engine, specs, profiles), p) for p in prompts
        ]
    finally:
        engine.close()
    for d, h in zip(device, host, strict=True):
        np.testing.assert_array_equal(d["tokens"], h["tokens"])
    assert generation.summary(device, prompts)["fp32_tokens_agree"] > 0.9
