"""Benchmark shapes from the engine's optimization profiles (the build manifest):
a headline shape at one profile point and a sweep over batch sizes (and sequence
lengths), every one placed in a profile that holds it before anything is measured.

The batch axis is each input's sample axis (pipeline.inputs.samples: model.sample_axis, else
the exporter's batch dim, whatever it is called: `batch`, `p2o.DynamicDimension.0`,
`unk__214`, none), so a Paddle export is timed in samples, not calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.core import shape_forms
from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model
from pipeline.inputs import samples
from pipeline.inputs.profiles import Profile, contains

if TYPE_CHECKING:
    import numpy as np

    from pipeline.core.config import BenchmarkConfig

SEQ_DIM = "seq"
Shapes = dict[str, list[int]]  # a concrete shape per input
Arrays = dict[str, "np.ndarray"]  # arrays by input (or output) name
Pair = tuple[Arrays, Arrays]  # a reference batch: (inputs, fp32 outputs)


@dataclass(frozen=True)
class Point:
    key: str  # "batch8" or "batch8_seq32": stable names for dvc metrics diff
    shapes: Shapes
    batch: int
    seq: int | None
    profile_index: int
    profile: str


def _axes(specs: list[onnx_model.TensorSpec], dim: str) -> dict[str, list[int]]:
    return {s.name: [a for a, d in enumerate(s.dims) if d == dim] for s in specs if dim in s.dims}


def batch_axes(
    specs: list[onnx_model.TensorSpec], axes: samples.Axes, profile: Profile
) -> dict[str, list[int]]:
    """Each input's batch axis: its sample axis where the model leaves that axis dynamic and
    the profile sizes it as the first such input's (min, opt, max), so an input that only
    looks batched (a state sized on its own) keeps its shape."""
    ranges: dict[str, tuple[int, list[int]]] = {}
    for s in specs:
        axis = axes.get(s.name)
        if axis is None or isinstance(s.dims[axis], int) or s.name not in profile["inputs"]:
            continue
        ranges[s.name] = (axis, [profile["inputs"][s.name][p][axis] for p in shape_forms.POINTS])
    first = next(iter(ranges.values()), (0, []))[1]
    return {name: [axis] for name, (axis, rng) in ranges.items() if rng == first}


def _dim_value(shapes: Mapping[str, Sequence[int]], axes: dict[str, list[int]]) -> int | None:
    return next((int(shapes[name][ax[0]]) for name, ax in axes.items() if name in shapes), None)


def _with(shapes: Shapes, axes: dict[str, list[int]], value: int | None) -> Shapes:
    out = {name: list(shape) for name, shape in shapes.items()}
    if value is not None:
        for name, ax in axes.items():
            for a in ax:
                out[name][a] = int(value)
    return out


def _describe(shapes: Mapping[str, Sequence[int]]) -> str:
    return ", ".join(f"{n}={list(s)}" for n, s in shapes.items())


def locate(shapes: Shapes, profiles: list[Profile]) -> int:
    """Index of the first profile that holds every input shape, else a one-line error."""
    for i, profile in enumerate(profiles):
        if contains(profile, shapes):
            return i
    ranges = "; ".join(
        f"{p['name']}: " + ", ".join(f"{n} {r['min']}..{r['max']}" for n, r in p["inputs"].items())
        for p in profiles
    )
    raise PipelineError(
        f"benchmark shape {_describe(shapes)} is outside every optimization profile of the engine "
        f"({ranges}); change benchmark.batch_sizes/seq_lens or the profile"
    )


def plan(
    bench_cfg: BenchmarkConfig,
    specs: list[onnx_model.TensorSpec],
    profiles: list[Profile],
    axes: samples.Axes | None = None,
) -> tuple[Point, list[Point]]:
    """(headline, sweep). axes: each input's sample axis (samples.sample_axes); None takes
    the specs' own (no model.sample_axis). Every shape is checked against the profiles
    here, before any measuring."""
    if not profiles:
        raise PipelineError("the build manifest lists no optimization profiles")
    names = [p["name"] for p in profiles]
    if bench_cfg.profile is not None and bench_cfg.profile not in names:
        raise PipelineError(
            f"benchmark.profile={bench_cfg.profile!r} is not a profile of the engine "
            f"(it has {', '.join(names)})"
        )
    base = profiles[names.index(bench_cfg.profile) if bench_cfg.profile is not None else 0]
    if axes is None:
        axes = samples.sample_axes(None, specs)
    by_batch = batch_axes(specs, axes, base)
    seq_axes = _axes(specs, SEQ_DIM)
    if bench_cfg.batch_sizes and not by_batch:
        raise PipelineError(
            "benchmark.batch_sizes is set but no model input has a dynamic batch axis "
            "(set model.sample_axis to name it)"
        )
    if bench_cfg.seq_lens and not seq_axes:
        raise PipelineError(f"benchmark.seq_lens is set but no model input has a '{SEQ_DIM}' dim")
    head_shapes = {n: list(r[bench_cfg.shape]) for n, r in base["inputs"].items()}
    head_seq = _dim_value(head_shapes, seq_axes)
    at_points = (
        _dim_value({n: r[p] for n, r in base["inputs"].items()}, by_batch)
        for p in shape_forms.POINTS
    )
    # None where the model has no such dim: one point along it
    # a profile's batch of 0 (an empty batch TensorRT accepts) is no point to time
    batches: list[int | None] = list(bench_cfg.batch_sizes) or [
        *sorted({b for b in at_points if b})
    ]
    seqs: list[int | None] = list(bench_cfg.seq_lens) or [head_seq]

    def point(shapes: Shapes) -> Point:
        batch, seq = _dim_value(shapes, by_batch), _dim_value(shapes, seq_axes)
        key = (f"batch{batch}" if batch is not None else "fixed") + (
            f"_seq{seq}" if seq is not None else ""
        )
        index = locate(shapes, profiles)
        return Point(key, shapes, batch or 1, seq, index, profiles[index]["name"])

    headline = point(head_shapes)
    sweep = [
        point(_with(_with(head_shapes, by_batch, b), seq_axes, s))
        for s in seqs
        for b in batches or [None]
    ]
    return headline, sweep


def reference_feeds(references: list[Pair], shapes: Shapes) -> Arrays | None:
    """Inputs of the given shapes taken from the reference inputs (model.reference_data):
    their rows, repeated as needed to fill the batch, cut to the point's size on every
    other axis (a prefix of each sequence); None where the data is smaller than the point."""
    import numpy as np

    if not references:
        return None
    pool = {k: np.concatenate([inputs[k] for inputs, _ in references]) for k in references[0][0]}
    out: Arrays = {}
    for name, shape in shapes.items():
        a = pool.get(name)
        if (
            a is None
            or a.ndim != len(shape)
            or any(have < want for have, want in zip(a.shape[1:], shape[1:]))
        ):
            return None
        index: tuple[np.ndarray | slice, ...] = (
            np.arange(shape[0]) % len(a),
            *tuple(slice(0, int(n)) for n in shape[1:]),
        )
        out[name] = a[index]
    return out


def choose_feeds(
    points: list[Point],
    pairs: list[Pair],
    use_reference: bool,
    sample: Callable[[Shapes], Arrays],
) -> tuple[dict[str, Arrays], list[str]]:
    """Per point: the user's reference inputs (model.reference_data) where they fit
    (use_reference), else sample(shapes);
    and the keys of the points that got reference inputs."""
    feeds: dict[str, Arrays] = {}
    used: list[str] = []
    for p in points:
        got = reference_feeds(pairs, p.shapes) if use_reference else None
        if got is not None:
            used.append(p.key)
        feeds[p.key] = got if got is not None else sample(p.shapes)
    return feeds, used
