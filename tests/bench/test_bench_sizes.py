"""The benchmark's shapes sized before any input is made: host memory for every point,
GPU memory for the largest point's buffers (given here as a number: NVML is what a GPU
host asks)."""

from __future__ import annotations

import pytest

from pipeline.bench import bench_sizes
from pipeline.bench.bench_shapes import plan
from pipeline.core.errors import PipelineError
from pipeline.graph.onnx_model import TensorSpec
from pipeline.inputs import profiles
from tests.conftest import compose

SPECS = [TensorSpec("images", "float32", ("batch", 3, 32, 32))]
OUTPUTS = [TensorSpec("logits", "float32", ("batch", 10))]
PER_SAMPLE = 3 * 32 * 32 * 4 + 10 * 4


def _points(cfg):
    headline, sweep = plan(cfg.benchmark, SPECS, profiles.resolve(cfg.profile, SPECS))
    return list({p.key: p for p in [headline, *sweep]}.values())


def test_the_largest_point_must_fit_the_gpu():
    cfg = compose("model=cnn")
    points = _points(cfg)
    top = max(p.batch for p in points)
    need = top * PER_SAMPLE
    bench_sizes.check(cfg, SPECS, OUTPUTS, points, gpu_free=need)  # exactly enough
    with pytest.raises(PipelineError) as e:
        bench_sizes.check(cfg, SPECS, OUTPUTS, points, gpu_free=need - 1)
    text = str(e.value)
    dims = list(cfg.profile.profiles[0].dims.batch)
    assert text.startswith(f"profile.profiles.0.dims.batch={dims}:")
    assert f"needs {need:,} bytes" in text and "GPU memory" in text


def test_benchmark_batch_sizes_are_named_when_they_ask_for_the_size():
    cfg = compose(
        "model=cnn",
        "benchmark.batch_sizes=[2,1000000000]",
        "profile.profiles.0.dims.batch=[1,8,1000000000]",
    )
    with pytest.raises(
        PipelineError, match=r"^benchmark.batch_sizes=\[2, 1000000000\]: .* of memory"
    ):
        bench_sizes.check(cfg, SPECS, OUTPUTS, _points(cfg), gpu_free=None)
