"""The benchmark stage on real engines built with TensorRT-RTX on the CPU: shapes
against the engine's profiles, backends side by side, accuracy, conditions, DVC
plot rows and the Markdown table. Checks structure and invariants, never speed."""

from __future__ import annotations

import inspect
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.bench import bench_shapes, torch_runner, trt_runner
from pipeline.bench.ort_runner import OrtRunner
from pipeline.bench.runner import Runner, TimingJob
from pipeline.core import config, fileio
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.graph.onnx_model import TensorSpec
from pipeline.machine import gpu_conditions
from pipeline.report.benchmark import benchmark_report
from tests.conftest import FAST_BENCH, REPO, _pipeline_through, compose

IMAGES = [TensorSpec("images", "float32", ("batch", 3, 32, 32))]
TOKENS = [
    TensorSpec("input_ids", "int64", ("batch", "seq")),
    TensorSpec("attention_mask", "int64", ("batch", "seq")),
]


def _profile(name, batch, seq=None):
    if seq is None:
        return {
            "name": name,
            "inputs": {"images": {p: [b, 3, 32, 32] for p, b in zip(("min", "opt", "max"), batch)}},
        }
    shape = {p: [b, s] for p, b, s in zip(("min", "opt", "max"), batch, seq)}
    return {"name": name, "inputs": {"input_ids": shape, "attention_mask": shape}}


def _bench(**kw):
    base = dict(profile=None, shape="opt", batch_sizes=[], seq_lens=[])
    base.update(kw)
    return config.validate({"benchmark": base}).benchmark


def test_default_sweep_is_the_profiles_min_opt_max_batch():
    head, sweep = bench_shapes.plan(_bench(), IMAGES, [_profile("default", [1, 8, 32])])
    assert (
        head.key == "batch8"
        and head.shapes == {"images": [8, 3, 32, 32]}
        and head.profile == "default"
    )
    assert [p.key for p in sweep] == ["batch1", "batch8", "batch32"]


def test_each_shape_is_placed_in_the_profile_that_holds_it():
    profiles = [_profile("latency", [1, 1, 4]), _profile("throughput", [8, 32, 64])]
    head, sweep = bench_shapes.plan(_bench(batch_sizes=[2, 16, 64]), IMAGES, profiles)
    assert (head.key, head.profile_index) == ("batch1", 0)
    assert [(p.batch, p.profile) for p in sweep] == [
        (2, "latency"),
        (16, "throughput"),
        (64, "throughput"),
    ]
    head, _ = bench_shapes.plan(_bench(profile="throughput", shape="max"), IMAGES, profiles)
    assert (head.key, head.profile_index) == ("batch64", 1)


def test_shape_outside_every_profile_is_one_line_error():
    profiles = [_profile("latency", [1, 1, 4]), _profile("throughput", [8, 32, 64])]
    with pytest.raises(PipelineError) as e:
        bench_shapes.plan(_bench(batch_sizes=[1, 6]), IMAGES, profiles)
    msg = str(e.value)
    assert (
        "\n" not in msg
        and "images=[6, 3, 32, 32]" in msg
        and "latency" in msg
        and "throughput" in msg
    )


PADDLE = [TensorSpec("x", "float32", ("p2o.DynamicDimension.0", 3, 48, "p2o.DynamicDimension.1"))]


def test_a_batch_dim_named_by_its_exporter_is_timed_in_samples():
    """paddle2onnx calls the batch `p2o.DynamicDimension.0`: the headline and the sweep
    still run at the profile's batch sizes, and a point counts its samples."""
    x = {"min": [1, 3, 48, 160], "opt": [4, 3, 48, 320], "max": [8, 3, 48, 960]}
    head, sweep = bench_shapes.plan(_bench(), PADDLE, [{"name": "default", "inputs": {"x": x}}])
    assert (head.key, head.batch, head.shapes) == ("batch4", 4, {"x": [4, 3, 48, 320]})
    assert [(p.key, p.batch) for p in sweep] == [("batch1", 1), ("batch4", 4), ("batch8", 8)]
    assert sweep[-1].shapes == {"x": [8, 3, 48, 320]}


def test_state_inputs_follow_the_batch_and_an_input_sized_on_its_own_keeps_its_shape():
    """A voice-activity detector as exported: unnamed dims, state [2, batch, 128] and a
    rank-0 sample rate; a second input whose first axis is sized apart is not the batch."""
    specs = [
        TensorSpec("input", "float32", (None, None)),
        TensorSpec("state", "float32", (2, None, 128)),
        TensorSpec("sr", "int64", ()),
        TensorSpec("table", "float32", (None, 4)),
    ]
    inputs = {
        "input": {"min": [1, 512], "opt": [2, 512], "max": [4, 512]},
        "state": {"min": [2, 1, 128], "opt": [2, 2, 128], "max": [2, 4, 128]},
        "sr": {"min": [], "opt": [], "max": []},
        "table": {"min": [16, 4], "opt": [16, 4], "max": [16, 4]},
    }
    head, sweep = bench_shapes.plan(_bench(), specs, [{"name": "default", "inputs": inputs}])
    assert head.batch == 2 and [p.batch for p in sweep] == [1, 2, 4]
    assert sweep[-1].shapes == {"input": [4, 512], "state": [2, 4, 128], "sr": [], "table": [16, 4]}


def test_sequence_sweep_for_models_with_a_seq_dim():
    profiles = [_profile("default", [1, 8, 32], [8, 32, 128])]
    head, sweep = bench_shapes.plan(
        _bench(batch_sizes=[1, 4], seq_lens=[16, 128]), TOKENS, profiles
    )
    assert head.key == "batch8_seq32"
    assert [p.key for p in sweep] == [
        "batch1_seq16",
        "batch4_seq16",
        "batch1_seq128",
        "batch4_seq128",
    ]
    assert sweep[-1].shapes == {"input_ids": [4, 128], "attention_mask": [4, 128]}
    with pytest.raises(PipelineError, match="outside every optimization profile"):
        bench_shapes.plan(_bench(seq_lens=[256]), TOKENS, profiles)


def test_sweep_keys_the_model_lacks_and_unknown_profiles_are_errors():
    with pytest.raises(PipelineError, match="no model input has a 'seq' dim"):
        bench_shapes.plan(_bench(seq_lens=[16]), IMAGES, [_profile("default", [1, 8, 32])])
    with pytest.raises(PipelineError, match="benchmark.profile='nope'.*default"):
        bench_shapes.plan(_bench(profile="nope"), IMAGES, [_profile("default", [1, 8, 32])])


@pytest.mark.parametrize(
    "override,message",
    [
        ({"backends": ["onnxruntime", "onnxruntime"]}, "name each backend once"),
        (
            {"backends": ["tflite"]},
            "benchmark.backends[0]: Invalid value 'tflite', expected one of [onnxruntime,",
        ),
        ({"baseline": "torch", "backends": ["onnxruntime"]}, "not in benchmark.backends"),
        ({"batch_sizes": [0]}, "at least 1"),
        ({"min_iterations": 0}, "benchmark.min_iterations"),
        ({"device": "tpu"}, "benchmark.device"),
    ],
)
def test_bad_benchmark_config_fails_at_validation(override, message):
    with pytest.raises(PipelineError, match=re.escape(message)):
        config.validate({"benchmark": override})


def test_torch_needs_a_factory():
    assert "ONNX file" in torch_runner.why_not(SimpleNamespace(factory=None))
    assert torch_runner.why_not(SimpleNamespace(factory="pipeline.zoo.cnn_classifier")) is None


def test_gpu_conditions_is_explicit_without_a_gpu():
    snap = gpu_conditions.snapshot()
    if snap["gpu"] is None:
        assert "GPU" in snap["reason"] or "nvidia-ml-py" in snap["reason"]
        assert gpu_conditions.summary(snap, snap) == snap["reason"]
    else:
        assert {"clocks_mhz", "temperature_c", "power_w", "performance_state"} <= set(snap)


def _copy_artifacts(layout: Layout, dest: Path) -> Layout:
    shutil.copytree(layout.root / "artifacts", dest / "artifacts")
    # the benchmark's summary reads the accuracy and build-gate files beside them
    shutil.copytree(layout.root / "metrics", dest / "metrics")
    return Layout(dest)


def _ordered(r: dict) -> bool:
    return r["min_ms"] <= r["median_ms"] <= r["p90_ms"] <= r["p95_ms"] <= r["p99_ms"] <= r["max_ms"]


def test_cnn_backends_side_by_side(built_cnn, tmp_path):
    cfg, built = built_cnn
    layout = _copy_artifacts(built, tmp_path)
    metrics = stages.benchmark(cfg, layout)

    res = metrics["results"]
    assert list(res) == ["onnxruntime", "onnxruntime_calibrated", "torch", "tensorrt"]
    for name in ("onnxruntime", "torch"):
        r = res[name]
        assert (
            r["status"] == "ok" and r["iterations"] >= cfg.benchmark.min_iterations and _ordered(r)
        )
        assert r["throughput_per_s"] == pytest.approx(
            r["iterations"] * r["batch"] / r["seconds"], rel=1e-3
        )
        for k in ("p90", "p95", "p99"):
            assert (k in r["low_sample_percentiles"]) == (
                r[f"{k}_tail_samples"] < cfg.benchmark.min_tail_samples
            )
        acc = r["accuracy"]["logits"]
        assert (
            acc["max_abs_error"] < 1e-4 and acc["cosine"] > 0.99999 and acc["top1_agreement"] == 1.0
        )
    assert (
        res["onnxruntime"]["label"].startswith("ONNX Runtime")
        and "exported fp32" in res["onnxruntime"]["label"]
    )
    assert res["torch"]["label"].startswith("PyTorch")
    assert res["onnxruntime"]["speedup_vs_onnxruntime"] == 1.0
    assert res["torch"]["speedup_vs_onnxruntime"] == pytest.approx(
        res["onnxruntime"]["median_ms"] / res["torch"]["median_ms"], rel=1e-3
    )
    assert res["onnxruntime_calibrated"]["status"] == "skipped"
    if metrics["conditions"]["gpu_before"]["gpu"] is None:
        assert res["tensorrt"] == {"status": "skipped", "reason": res["tensorrt"]["reason"]}
        assert "GPU" in res["tensorrt"]["reason"]

    assert metrics["headline"] == "batch8" and metrics["shapes"] == {"images": [8, 3, 32, 32]}
    assert list(metrics["by_shape"]) == ["batch1", "batch8", "batch32"]
    for key, row in metrics["by_shape"].items():
        assert set(row) == {"onnxruntime", "torch"}
        assert all(r["batch"] == int(key[5:]) for r in row.values())

    c = metrics["conditions"]
    assert c["fingerprint"] == json.loads(layout.fingerprint.read_text())["id"]
    assert (
        c["cpu"]
        and c["usable_cpus"] >= 1
        and c["versions"]["onnxruntime"]
        and c["versions"]["torch"]
    )
    assert "gpu" in c["gpu_before"] and "gpu" in c["gpu_after"]

    saved = json.loads((layout.metrics_dir / "benchmark.json").read_text())
    assert saved["results"]["onnxruntime"]["median_ms"] == res["onnxruntime"]["median_ms"]
    for plot in ("benchmark_latency.json", "benchmark_throughput.json"):
        rows = json.loads((layout.metrics_dir / plot).read_text())
        assert {(r["backend"], r["batch"]) for r in rows} == {
            (b, n) for b in ("onnxruntime", "torch") for n in (1, 8, 32)
        }
        assert all(r["latency_ms"] > 0 and r["throughput_per_s"] > 0 for r in rows)
    md = (layout.metrics_dir / "benchmark.md").read_text()
    assert "| onnxruntime |" in md and "| torch |" in md and "`tensorrt` skipped" in md
    assert "## Against batch size" in md and "## Conditions" in md
    everything = md + json.dumps(saved)
    assert not re.search(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}:\d{2}", everything), (
        "no timestamps in outputs"
    )


def test_shape_outside_the_engine_fails_before_measuring(built_cnn, tmp_path):
    _cfg, built = built_cnn
    layout = _copy_artifacts(built, tmp_path)
    bad = compose("model=cnn", "precision=fp32", *FAST_BENCH, "benchmark.batch_sizes=[4,64]")
    with pytest.raises(
        PipelineError, match=r"images=\[64, 3, 32, 32\] is outside every optimization profile"
    ):
        stages.benchmark(bad, layout)
    assert (
        not (layout.metrics_dir / "benchmark.json").exists()
        and not (layout.metrics_dir / "summary.json").exists()
    )


def test_transformer_sweep_over_batch_and_sequence(built_transformer, tmp_path):
    _, built = built_transformer
    layout = _copy_artifacts(built, tmp_path)
    cfg = compose(
        "model=transformer",
        "precision=fp32",
        *FAST_BENCH,
        "benchmark.backends=[onnxruntime,torch]",
        "benchmark.batch_sizes=[1,4]",
        "benchmark.seq_lens=[16,64]",
    )
    metrics = stages.benchmark(cfg, layout)
    assert list(metrics["by_shape"]) == [
        "batch1_seq16",
        "batch4_seq16",
        "batch1_seq64",
        "batch4_seq64",
    ]
    assert metrics["by_shape"]["batch4_seq64"]["torch"]["batch"] == 4
    assert metrics["results"]["torch"]["accuracy"]["logits"]["cosine"] > 0.9999
    series = {r["series"] for r in benchmark_report.plot_rows(metrics)}
    assert series == {f"{b} seq={s}" for b in ("onnxruntime", "torch") for s in (16, 64)}


def test_onnxruntime_runs_the_fp16_graph_tensorrt_builds(tmp_path):
    cfg = compose(
        "model=cnn",
        "precision=fp16",
        *FAST_BENCH,
        "benchmark.backends=[onnxruntime,onnxruntime_calibrated]",
        "benchmark.batch_sizes=[8]",
    )
    layout = _pipeline_through(tmp_path, cfg, "build")
    metrics = stages.benchmark(cfg, layout)
    cal = metrics["results"]["onnxruntime_calibrated"]
    assert cal["status"] == "ok" and "fp16 graph TensorRT builds" in cal["label"]
    acc = cal["accuracy"]["logits"]
    assert 0 < acc["max_abs_error"] < 0.1 and acc["cosine"] > 0.999
    assert (
        metrics["results"]["onnxruntime"]["accuracy"]["logits"]["max_abs_error"]
        < acc["max_abs_error"]
    )
    assert fileio.read_json(layout.metrics_dir / "benchmark.json")["precision"] == "fp16"


def test_dvc_draws_latency_and_throughput_per_backend(in_tmp_repo_copy):
    import subprocess
    import sys

    by_shape = {
        f"batch{b}": {
            k: {"batch": b, "median_ms": b * f, "p99_ms": 2 * b * f, "throughput_per_s": 1e3 / f}
            for k, f in (("onnxruntime", 1.0), ("torch", 2.0))
        }
        for b in (1, 8)
    }
    rows = benchmark_report.plot_rows({"by_shape": by_shape})
    for name in ("benchmark_latency.json", "benchmark_throughput.json"):
        fileio.write_json(in_tmp_repo_copy / "metrics" / name, rows)
    r = subprocess.run(
        [sys.executable, "-m", "dvc", "plots", "show", "--json"],
        cwd=in_tmp_repo_copy,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    plots = json.loads(r.stdout)["data"]
    for name, y in (
        ("benchmark_latency.json", "latency_ms"),
        ("benchmark_throughput.json", "throughput_per_s"),
    ):
        spec = plots[f"metrics/{name}"][0]["content"]
        assert spec["encoding"]["x"]["field"] == "batch" and spec["encoding"]["y"]["field"] == y
        assert (
            spec["encoding"]["color"]["field"] == "series"
            and spec["encoding"]["strokeDash"]["field"] == "rev"
        )
        assert {(v["series"], v["batch"]) for v in spec["data"]["values"]} == {
            (k, b) for k in ("onnxruntime", "torch") for b in (1, 8)
        }


def test_a_graph_onnxruntime_cannot_load_is_a_finding_not_a_crash(built_cnn, tmp_path, monkeypatch):
    from pipeline.engine import verify
    from pipeline.flow import upstream

    _, built = built_cnn
    layout = _copy_artifacts(built, tmp_path)
    (layout.calibrate_dir / "model.onnx").write_bytes(b"not an onnx graph")
    # The stage refuses a calibrated graph that is not the engine's (tests/e2e/test_incremental.py);
    # here the runner itself is judged, so only the machine and engine bytes are checked.
    monkeypatch.setattr(
        upstream,
        "current",
        lambda cfg, lay, fp: verify.assert_loadable(lay.engine_dir(fp["id"]), fp),
    )
    cfg = compose(
        "model=cnn",
        "precision=fp32",
        *FAST_BENCH,
        "benchmark.backends=[onnxruntime,onnxruntime_calibrated]",
        "benchmark.batch_sizes=[8]",
    )
    res = stages.benchmark(cfg, layout)["results"]
    assert res["onnxruntime"]["status"] == "ok"
    assert res["onnxruntime_calibrated"]["status"] == "skipped"
    assert "ONNX Runtime cannot load" in res["onnxruntime_calibrated"]["reason"]


def test_every_backend_fills_one_runner_contract():
    runners = (OrtRunner, torch_runner.TorchRunner, trt_runner.EngineRunner)
    for member in ("infer", "time"):
        expected = inspect.signature(getattr(Runner, member))
        for cls in runners:
            assert issubclass(cls, Runner)
            got = inspect.signature(getattr(cls, member))
            assert list(got.parameters) == list(expected.parameters), (cls.__name__, member, got)


def test_onnxruntime_runner_through_the_contract():
    bench = _bench(warmup_s=0.0, min_duration_s=0.0, min_iterations=5)
    feeds = {"features": np.ones((2, 16), dtype=np.float32)}
    with OrtRunner(REPO / "pipeline/zoo/onnx/tiny_mlp.onnx", bench, "cpu", "tiny") as runner:
        assert (
            runner.device == "cpu"
            and runner.label.startswith("ONNX Runtime")
            and runner.label.endswith("tiny")
        )
        out = runner.infer(feeds, 0)
        assert list(out) == ["scores"] and out["scores"].shape[0] == 2
        times, notes = runner.time(TimingJob(feeds, 0, bench))
        assert set(times) == {"host"} and times["host"].size >= 5 and notes == {}
        assert runner.layer_times(feeds, 0, 1, 1) is None


def test_progress_bar_reads_percent_not_a_rate():
    import io

    from rich.console import Console
    from rich.progress import Progress

    from pipeline.core import console

    out = io.StringIO()
    with Progress(
        *console.columns(percent=True), console=Console(file=out, force_terminal=True, width=80)
    ) as p:
        p.add_task("benchmark torch batch8", total=100, completed=42, note="")
    line = out.getvalue()
    assert "42%" in line and "/s" not in line and "benchmark torch batch8" in line
