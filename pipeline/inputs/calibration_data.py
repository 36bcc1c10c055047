"""The batches that calibrate a Q/DQ graph, checked against
the model's inputs before any calibration runs, with a content hash for the cache.

Sources: `directory` (a folder of .npz files keyed by input name, or <input>.npy files;
the first axis counts samples), `factory` (a module's calibration_batches(num_samples,
batch_size, seed)), `random` (only when asked for by name; it is flagged everywhere).
Folders are read by pipeline.inputs.array_folder, the one loader that reference data
(model.reference_data) uses too; files are read without unpickling."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from pipeline.core import fileio, memory
from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model
from pipeline.inputs import input_roles, sample_data, samples
from pipeline.inputs.array_folder import LABEL_PREFIX, check, data_sha256, read_folder
from pipeline.inputs.reference_file import Pair

if TYPE_CHECKING:
    from pipeline.core.config import CalibrationConfig, ModelConfig

# calibration=none with an int8/fp8 precision: the model factory's own calibration_batches
# with these settings (conf/calibration/none.yaml says so; calibration.json records it).
FALLBACK_SAMPLES, FALLBACK_BATCH = 64, 8
RANDOM_STREAM = 0x5A4D


@dataclass
class CalibrationSet:
    batches: list[dict[str, np.ndarray]]
    info: dict[str, Any]  # JSON-safe description: where the data came from, how much, its sha256
    axes: samples.Axes  # per input, the axis counting samples (None: shared)
    digests: set[str] = field(default_factory=set)

    def uses(self, feeds: dict[str, np.ndarray]) -> bool:
        """True if any sample of `feeds` is also a calibration sample."""
        return bool(sample_digests(feeds, self.axes) & self.digests)


def row_digests(batch: dict[str, np.ndarray], axes: samples.Axes) -> list[str]:
    """One sha256 per sample (along each input's sample axis; a shared input whole) over
    every input's row: names, dtypes, shapes, bytes."""
    names = sorted(batch)
    out = []
    for i in range(samples.count(batch, axes)):
        h = hashlib.sha256()
        one = samples.row(batch, axes, i)
        for name in names:
            row = np.ascontiguousarray(one[name])
            h.update(f"{name}|{row.dtype.str}|{row.shape}|".encode())
            h.update(row.tobytes())
        out.append(h.hexdigest())
    return out


def sample_digests(batch: dict[str, np.ndarray], axes: samples.Axes) -> set[str]:
    return set(row_digests(batch, axes))


def held_out(pairs: list[Pair], data: CalibrationSet) -> tuple[list[Pair], dict[str, int]]:
    """Reference (inputs, outputs) batches without any sample that is also a calibration
    sample, compared by content; and how much overlapped. A batch whose outputs do not
    share the inputs' sample axis is dropped whole when any of its samples overlaps."""
    kept, total, overlap = [], 0, 0
    for inputs, outputs in pairs:
        fresh = [d not in data.digests for d in row_digests(inputs, data.axes)]
        total, overlap = total + len(fresh), overlap + fresh.count(False)
        if all(fresh):
            kept.append((inputs, outputs))
        elif any(fresh) and all(np.ndim(v) and len(v) == len(fresh) for v in outputs.values()):
            idx = np.flatnonzero(fresh)
            kept.append(
                (samples.take(inputs, data.axes, idx), {k: v[idx] for k, v in outputs.items()})
            )
    return kept, {
        "reference_samples": total,
        "overlapping_samples": overlap,
        "held_out_samples": sum(samples.count(p[0], data.axes) for p in kept),
    }


def load(
    calibration_cfg: CalibrationConfig, model_cfg: ModelConfig, onnx_path: Path
) -> CalibrationSet:
    """The calibration set for the export's graph at `onnx_path`, batched along the
    sample axes the export recorded beside it (export.json)."""
    specs = onnx_model.inputs(onnx_model.load(onnx_path, check=False, weights=False))
    source, n, bs, info = _requested(calibration_cfg, model_cfg)
    layout = samples.layout_of_export(onnx_path.parent)
    if source == "directory":
        batches = _from_directory(calibration_cfg, specs, layout, n, bs)
        info.update(path=str(calibration_cfg.path))
    elif source == "prompts":
        batches = _from_prompts(calibration_cfg, model_cfg, onnx_path, specs, n, bs)
        info.update(path=str(calibration_cfg.path), decode_steps=int(model_cfg.decode_steps))
    else:
        _check_size(model_cfg, specs, layout, n, bs)
        seed = int(calibration_cfg.seed)
        if source == "factory":
            name = calibration_cfg.factory or model_cfg.factory
            batches = _from_factory(name, specs, layout, n, bs, seed)
            info.update(factory=name)
        else:
            graph = onnx_model.load(onnx_path, check=False, weights=False).graph
            input_roles.check_random_inputs(graph, specs, model_cfg)
            where = "random inputs"
            drawn = _random(model_cfg, specs, layout, n, bs, seed)
            batches = _take(_checked(drawn, specs, layout, where), layout, n, where)
            info.update(random=True, note=RANDOM_NOTE)
        info["seed"] = seed
    _describe_set(info, batches, layout)
    digests = set().union(*(sample_digests(b, layout.axes) for b in batches))
    return CalibrationSet(batches, info, layout.axes, digests)


def batch_shapes(data: CalibrationSet) -> list[tuple[tuple[str, tuple[int, ...]], ...]]:
    """Each batch's shape: every input's, by name."""
    return [tuple(sorted((k, tuple(v.shape)) for k, v in b.items())) for b in data.batches]


def of_one_shape(data: CalibrationSet) -> CalibrationSet:
    """The largest group of `data`'s batches that share every input's shape (the first
    such group on a tie), said in its info: ModelOpt's int4 AWQ stacks all batches into one
    array per input, which a decoder's steps (each past one longer) cannot make."""
    shapes = batch_shapes(data)
    if len(set(shapes)) == 1:
        return data
    common = max(dict.fromkeys(shapes), key=shapes.count)
    kept = [b for b, s in zip(data.batches, shapes) if s == common]
    info = {
        **data.info,
        "num_batches": len(kept),
        "sha256": data_sha256(kept),
        "one_shape": f"{len(kept)} of {len(shapes)} batches: ModelOpt's AWQ stacks the "
        f"batches, so only those of one shape (the most common) calibrate",
    }
    digests = set().union(*(sample_digests(b, data.axes) for b in kept))
    return CalibrationSet(kept, info, data.axes, digests)


RANDOM_NOTE = (
    "calibrated on random inputs, not real data: the scales and the accuracy figures say "
    "little about real inputs"
)


def _requested(
    calibration_cfg: CalibrationConfig, model_cfg: ModelConfig
) -> tuple[str, int, int, dict[str, Any]]:
    """(source, samples, batch size, the info record so far), checked; calibration=none
    with a model factory that has calibration_batches() is that factory's set."""
    source = str(calibration_cfg.source)
    n, bs = int(calibration_cfg.num_samples), int(calibration_cfg.batch_size)
    info: dict[str, Any] = {"source": source, "random": False}
    if source == "none":
        if not model_cfg.factory or not hasattr(_module(model_cfg.factory), "calibration_batches"):
            raise PipelineError(
                f"precision needs calibration data and calibration=none gives none: model '{model_cfg.name}' "
                f"has no factory with calibration_batches(); pick a calibration set (calibration.source="
                f"directory with calibration.path) or set calibration.source=random to calibrate on random data"
            )
        source, n, bs = "factory", FALLBACK_SAMPLES, FALLBACK_BATCH
        info.update(
            source="factory", fallback="calibration=none: the model factory's calibration_batches()"
        )
    if bs < 1:
        raise PipelineError(f"invalid config: calibration.batch_size={bs}; must be at least 1")
    if n < 0 or (n == 0 and source not in ("directory", "prompts")):
        raise PipelineError(
            f"invalid config: calibration.num_samples={n}; must be positive for source {source}"
        )
    return source, n, bs, info


def _from_directory(
    calibration_cfg: CalibrationConfig,
    specs: list[onnx_model.TensorSpec],
    layout: samples.SampleLayout,
    n: int,
    bs: int,
) -> list[dict[str, np.ndarray]]:
    if not calibration_cfg.path:
        raise PipelineError("calibration.source=directory needs calibration.path")
    batches = read_folder(
        calibration_cfg.path,
        specs,
        "calibration data",
        "calibration.num_samples",
        n,
        bs,
        key="calibration.path",
        axes=layout.axes,
        labels=True,  # a folder made for model.reference_data serves calibration too
        batch_key="calibration.batch_size",
    )
    return [{k: v for k, v in b.items() if not k.startswith(LABEL_PREFIX)} for b in batches]


def _from_prompts(
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
    onnx_path: Path,
    specs: list[onnx_model.TensorSpec],
    n: int,
    bs: int,
) -> list[dict[str, np.ndarray]]:
    """A decoder's prompts (calibration.path) through prefill and model.decode_steps greedy
    steps of the fp32 graph: every step a batch, so both profiles' activations calibrate."""
    from pipeline.inputs import decoder_runs, prompts

    if not calibration_cfg.path:
        raise PipelineError("calibration.source=prompts needs calibration.path")
    tracked = (calibration_cfg.path, model_cfg.source)  # what the calibrate stage tracks
    given = prompts.read(calibration_cfg.path, model_cfg.tokenizer, "calibration.path", tracked)
    limits = decoder_runs.Limits(int(model_cfg.decode_steps))
    return decoder_runs.batches(onnx_path, specs, given[: n or None], bs, limits)


def _from_factory(
    name: str | None,
    specs: list[onnx_model.TensorSpec],
    layout: samples.SampleLayout,
    n: int,
    bs: int,
    seed: int,
) -> list[dict[str, np.ndarray]]:
    if not name:
        raise PipelineError(
            "calibration.source=factory needs calibration.factory or a model factory"
        )
    fn = getattr(_module(name), "calibration_batches", None)
    if fn is None:
        raise PipelineError(
            f"calibration factory '{name}' has no calibration_batches(num_samples, batch_size, seed)"
        )
    where = f"{name}.calibration_batches"
    return _take(_checked(fn(n, bs, seed), specs, layout, where), layout, n, where)


def _describe_set(
    info: dict[str, Any], batches: list[dict[str, np.ndarray]], layout: samples.SampleLayout
) -> None:
    """How much data, in what batches, of what shapes, and its content hash."""
    counts = [samples.count(b, layout.axes) for b in batches]
    info.update(
        num_samples=sum(counts),
        batch_size=max(counts),
        num_batches=len(batches),
        sha256=data_sha256(batches),
        inputs={k: _described(v, layout.axes.get(k)) for k, v in batches[0].items()},
    )


class DescribedInput(TypedDict):
    """An input of the calibration data as its info's `inputs` describes it."""

    dtype: str
    shape: list[int | str]  # "N" at the axis counting samples


def _described(a: np.ndarray, axis: int | None) -> DescribedInput:
    """dtype and shape with the sample axis as N (a shared input: its own shape)."""
    shape: list[int | str] = list(a.shape)
    if axis is not None:
        shape[axis] = "N"
    return {"dtype": str(a.dtype), "shape": shape}


def _check_size(
    model_cfg: ModelConfig,
    specs: list[onnx_model.TensorSpec],
    layout: samples.SampleLayout,
    n: int,
    bs: int,
) -> None:
    """n samples of the model's inputs (at the sample layout, one sample each) fit in memory."""
    from pipeline.inputs import sizes

    one = sizes.input_bytes(model_cfg, specs, layout.at_batch(1), drawn=False)
    if one is not None:
        what = f"{n} calibration samples in batches of {bs}"
        memory.require_memory(one * n, f"calibration.num_samples={n}", what)


def _module(name: str) -> object:
    from pipeline.inputs import factory

    return factory.resolve(name, "calibration factory")


def _random(
    model_cfg: ModelConfig,
    specs: list[onnx_model.TensorSpec],
    layout: samples.SampleLayout,
    n: int,
    bs: int,
    seed: int,
) -> Iterable[dict[str, np.ndarray]]:
    """Batches of random inputs until n samples: as many per batch as the model's own
    sample axes allow (a static batch of 1 gives n batches of one sample)."""
    rng = np.random.default_rng([seed, RANDOM_STREAM])
    fixed = {
        d
        for s in specs
        if (a := layout.axes.get(s.name)) is not None and isinstance(d := s.dims[a], int)
    }
    total = 0
    while total < n:
        want = min(fixed) if fixed else min(bs, n - total)
        batch = sample_data.sample_inputs(model_cfg, specs, layout.at_batch(want), rng)
        size = samples.count(batch, layout.axes)
        if size < 1:
            raise PipelineError("random inputs: the model's batch dimension is 0")
        total += size
        yield batch


def _checked(
    batches: Iterable[dict[str, np.ndarray]],
    specs: list[onnx_model.TensorSpec],
    layout: samples.SampleLayout,
    where: str,
) -> Iterable[dict[str, np.ndarray]]:
    for i, b in enumerate(batches):
        check(b, specs, f"{where} batch {i}", axes=layout.axes)
        yield b


def _take(
    batches: Iterable[dict[str, np.ndarray]], layout: samples.SampleLayout, n: int, where: str
) -> list[dict[str, np.ndarray]]:
    out, total = [], 0
    for b in batches:
        size = samples.count(b, layout.axes)
        out.append(samples.take(b, layout.axes, slice(0, n - total)) if total + size > n else b)
        total += min(size, n - total)
        if total >= n:
            return out
    raise PipelineError(f"calibration.num_samples={n} but {where} gave only {total} samples")


def write_set(
    dest: Path, batches: list[dict[str, np.ndarray]], axes: samples.Axes | None = None
) -> Path:
    """One .npz with the batches stacked along their sample axes (axis 0 where not
    given): how data/calibration/<model>/ was made."""
    axes = axes if axes is not None else {k: 0 for k in batches[0]}
    return fileio.write_npz(dest, samples.concat(batches, axes))
