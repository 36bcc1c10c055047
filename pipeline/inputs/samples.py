"""One batch of sample inputs: each input's shape, and the axis along which it counts
samples. Export (reference inputs), calibration (random sets, folders) and the accuracy
figures all batch, split and count samples through here, so a model whose inputs are not
a plain [batch, ...] stack (a rank-0 sample rate, recurrent state [layers, batch, hidden])
is handled the same way everywhere.

Shapes: an input's opt shape in the first optimization profile (profile.shapes, or the
profile's named dims), with model.sample_dims overriding named dims; so a model says each
dynamic input's shapes once. Sample axes: model.sample_axis where given (null: an input
the whole batch shares); rank 0 has none; else the axis holding the batch dim (the
symbolic dim at axis 0 of the first input that has one); else the first dynamic axis;
else axis 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.graph.onnx_model import TensorSpec
from pipeline.inputs import profiles

if TYPE_CHECKING:
    import numpy.typing as npt

    from pipeline.core.config import ModelConfig, ProfileConfig

Axes = dict[str, int | None]


@dataclass(frozen=True)
class SampleLayout:
    shapes: dict[str, list[int]]  # one batch, per input
    axes: Axes  # per input, the axis counting samples; None: shared by the batch

    @property
    def batch(self) -> int:
        """Samples in one batch: the sample axis' size (1 where every input is shared)."""
        sizes = {self.shapes[n][a] for n, a in self.axes.items() if a is not None}
        return min(sizes) if sizes else 1

    def at_batch(self, n: int) -> dict[str, list[int]]:
        """The shapes with `n` samples."""
        out = {name: list(shape) for name, shape in self.shapes.items()}
        for name, axis in self.axes.items():
            if axis is not None:
                out[name][axis] = int(n)
        return out


def layout(
    model_cfg: ModelConfig, profile_cfg: ProfileConfig, specs: list[TensorSpec]
) -> SampleLayout:
    """The sample inputs' layout for the model: one error lists every input without a shape."""
    first = profiles.resolve(profile_cfg, specs)[0]["inputs"]
    overrides = dict(model_cfg.sample_dims)
    shapes: dict[str, list[int]] = {}
    for spec in specs:
        shape = list(first[spec.name]["opt"])
        for axis, dim in enumerate(spec.dims):
            if isinstance(dim, str) and dim in overrides:
                shape[axis] = int(overrides[dim])
        shapes[spec.name] = shape
    axes = sample_axes(model_cfg, specs)
    _check_counts(shapes, axes)
    return SampleLayout(shapes, axes)


def factory_dims(model_cfg: ModelConfig, profile_cfg: ProfileConfig) -> dict[str, int]:
    """A torch factory's sample dims by name (before an ONNX file exists): the first
    profile's opt sizes, then model.sample_dims."""
    first = profile_cfg.profiles[0]
    return {
        **{str(d): int(triple[1]) for d, triple in first.dims.items()},
        **{str(d): int(v) for d, v in model_cfg.sample_dims.items()},
    }


def named_dims(specs: list[TensorSpec], shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """{dim name: size} of the named dims in `shapes` (a factory's sampler takes these)."""
    out: dict[str, int] = {}
    for spec in specs:
        for dim, size in zip(spec.dims, shapes.get(spec.name, ())):
            if isinstance(dim, str):
                out.setdefault(dim, int(size))
    return out


def batch_dim(specs: list[TensorSpec]) -> str | None:
    """The name the batch carries: the symbolic dim at axis 0 of the first input with one."""
    return next((s.dims[0] for s in specs if s.dims and isinstance(s.dims[0], str)), None)


def sample_axes(model_cfg: ModelConfig | None, specs: list[TensorSpec]) -> Axes:
    """Each input's sample axis (the module's docstring says how); model_cfg None: the
    specs' own, without model.sample_axis."""
    given = dict(getattr(model_cfg, "sample_axis", None) or {})
    names = {s.name for s in specs}
    unknown = sorted(set(given) - names)
    if unknown:
        raise PipelineError(
            f"invalid config: model.sample_axis names '{unknown[0]}', which is not an input of "
            f"the model (its inputs: {', '.join(sorted(names))})"
        )
    batch = batch_dim(specs)
    axes: Axes = {}
    for spec in specs:
        if spec.name in given:
            axis = given[spec.name]
            if axis is not None and not 0 <= int(axis) < max(len(spec.dims), 1):
                raise PipelineError(
                    f"invalid config: model.sample_axis.{spec.name}={axis}, but input "
                    f"'{spec.name}' has rank {len(spec.dims)}"
                )
            axes[spec.name] = None if axis is None or not spec.dims else int(axis)
        elif not spec.dims:
            axes[spec.name] = None
        elif batch is not None and batch in spec.dims:
            axes[spec.name] = spec.dims.index(batch)
        else:
            dynamic = [a for a, d in enumerate(spec.dims) if not isinstance(d, int)]
            axes[spec.name] = dynamic[0] if dynamic else 0
    return axes


def _check_counts(shapes: dict[str, list[int]], axes: Axes) -> None:
    counts = {n: shapes[n][a] for n, a in axes.items() if a is not None}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{n} axis {axes[n]}: {c}" for n, c in counts.items())
        raise PipelineError(
            f"the sample inputs disagree on the number of samples ({listed}); give each input "
            f"the axis that counts samples, e.g. -S 'model.sample_axis={{{next(iter(counts))}: 0}}' "
            f"(null for an input the whole batch shares)"
        )


def count(batch: Mapping[str, np.ndarray], axes: Axes) -> int:
    """Samples in a batch (1 where every input is shared)."""
    for name, axis in axes.items():
        if axis is not None and name in batch:
            return int(np.shape(batch[name])[axis])
    return 1


def take(
    batch: Mapping[str, np.ndarray], axes: Axes, index: slice | npt.ArrayLike
) -> dict[str, np.ndarray]:
    """The samples `index` (a slice or integer array) of every input; shared ones whole."""
    out: dict[str, np.ndarray] = {}
    for name, a in batch.items():
        axis = axes.get(name, 0)
        out[name] = a if axis is None else np.take(a, _positions(a, axis, index), axis=axis)
    return out


def _positions(a: np.ndarray, axis: int, index: slice | npt.ArrayLike) -> np.ndarray:
    if isinstance(index, slice):
        return np.arange(a.shape[axis])[index]
    return np.asarray(index)


def split(
    arrays: Mapping[str, np.ndarray], axes: Axes, n: int, size: int
) -> list[dict[str, np.ndarray]]:
    """The first n samples in batches of `size`."""
    return [take(arrays, axes, slice(s, min(s + size, n))) for s in range(0, n, size)]


def concat(parts: Sequence[Mapping[str, np.ndarray]], axes: Axes) -> dict[str, np.ndarray]:
    """Batches joined along their sample axes; a shared input taken from the first."""
    out: dict[str, np.ndarray] = {}
    for name in parts[0]:
        axis = axes.get(name, 0)
        if axis is None:
            out[name] = parts[0][name]
        else:
            out[name] = np.concatenate([p[name] for p in parts], axis=axis)
    return out


def row(batch: Mapping[str, np.ndarray], axes: Axes, i: int) -> dict[str, np.ndarray]:
    """Sample i of every input (a shared input whole): what a per-sample digest reads."""
    return {
        name: a if axes.get(name, 0) is None else np.take(a, i, axis=axes.get(name, 0) or 0)
        for name, a in batch.items()
    }


def layout_of_export(export_dir: Path) -> SampleLayout:
    """The sample layout the export used (its export.json)."""
    from pipeline.records import export_file

    recorded = export_file.sample_axes(export_dir)
    return SampleLayout(recorded["shapes"], recorded["axes"])
