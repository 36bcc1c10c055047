"""The memory a benchmark's shapes need, checked before any input is made: every point's
inputs are held at once on the host, and one point's inputs and outputs at a time in GPU
buffers. A profile whose max batch is two billion ends here in one line naming the
setting, not in a MemoryError halfway through drawing inputs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.bench.bench_shapes import Point
from pipeline.core import memory
from pipeline.graph.onnx_model import TensorSpec
from pipeline.inputs import samples, sizes

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig


def setting(cfg: PipelineConfig, point: Point) -> str:
    """The config key that asked for `point`'s size."""
    bc = cfg.benchmark
    if bc.batch_sizes:
        return f"benchmark.batch_sizes={list(bc.batch_sizes)}"
    names = [str(p.name) for p in cfg.profile.profiles]
    i = names.index(point.profile) if point.profile in names else 0
    spec = cfg.profile.profiles[i]
    if "batch" in spec.dims:
        return f"profile.profiles.{i}.dims.batch={list(spec.dims['batch'])}"
    return f"profile.profiles.{i}.shapes (profile '{point.profile}')"


def check(
    cfg: PipelineConfig,
    specs: list[TensorSpec],
    outputs: list[TensorSpec],
    points: list[Point],
    gpu_free: int | None,
) -> None:
    """Host memory for every point's inputs; GPU memory (gpu_free, None without a GPU) for
    the largest point's inputs and outputs."""
    # (inputs' bytes, a draw's extra bytes, outputs' bytes, the point)
    per_point: list[tuple[int, int, int, Point]] = []
    for p in points:
        kept = sizes.input_bytes(cfg.model, specs, p.shapes, drawn=False)
        drawing = sizes.input_bytes(cfg.model, specs, p.shapes)
        if kept is None or drawing is None:
            return  # a factory that cannot say; drawing the inputs says what is wrong
        out = sizes.output_shapes(outputs, samples.named_dims(specs, p.shapes))
        per_point.append((kept, drawing - kept, sizes.spec_bytes(outputs, out), p))
    if not per_point:
        return
    biggest = max(per_point, key=lambda t: t[0] + t[2])
    key = setting(cfg, biggest[3])
    # every point's inputs, one draw, and the outputs of the point being run
    host = sum(t[0] for t in per_point) + max(t[1] for t in per_point) + biggest[2]
    what = f"the benchmark's inputs at {len(per_point)} shape(s) (largest: {biggest[3].key})"
    memory.require_memory(host, key, what)
    memory.require_gpu_memory(
        biggest[0] + biggest[2], key, f"the inputs and outputs at {biggest[3].key}", gpu_free
    )
