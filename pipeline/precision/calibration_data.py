"""CalibrationSetFromConfig: the batches that calibrate a Q/DQ graph, checked against
the model's inputs before any calibration runs, with a content hash for the cache.

Sources: `directory` (a folder of .npz files keyed by input name, or <input>.npy files;
the first axis counts samples), `factory` (a module's calibration_batches(num_samples,
batch_size, seed)), `random` (only when asked for by name; it is flagged everywhere).
Folders are read by pipeline.export.array_folder, the one loader that reference data
(model.reference_data) uses too; files are read without unpickling."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core import fileio, memory
from pipeline.core.errors import PipelineError
from pipeline.export import onnx_model
from pipeline.export.array_folder import check, data_sha256, read_folder

# calibration=none with an int8/fp8 precision: the model factory's own calibration_batches
# with these settings (conf/calibration/none.yaml says so; calibration.json records it).
FALLBACK_SAMPLES, FALLBACK_BATCH = 64, 8
RANDOM_STREAM = 0x5A4D


@dataclass
class CalibrationSet:
    batches: list[dict[str, np.ndarray]]
    info: dict  # JSON-safe description: where the data came from, how much, its sha256
    digests: set[str] = field(default_factory=set)

    def uses(self, feeds: dict[str, np.ndarray]) -> bool:
        """True if any sample of `feeds` is also a calibration sample."""
        return bool(sample_digests(feeds) & self.digests)


def row_digests(batch: dict[str, np.ndarray]) -> list[str]:
    """One sha256 per sample (axis 0) over every input's row: names, dtypes, shapes, bytes."""
    names = sorted(batch)
    out = []
    for i in range(len(batch[names[0]])):
        h = hashlib.sha256()
        for name in names:
            row = np.ascontiguousarray(batch[name][i])
            h.update(f"{name}|{row.dtype.str}|{row.shape}|".encode())
            h.update(row.tobytes())
        out.append(h.hexdigest())
    return out


def sample_digests(batch: dict[str, np.ndarray]) -> set[str]:
    return set(row_digests(batch))


def held_out(
    pairs: list[tuple[dict, dict]], data: CalibrationSet
) -> tuple[list[tuple[dict, dict]], dict]:
    """Reference (inputs, outputs) batches without any sample that is also a calibration
    sample, compared by content; and how much overlapped. A batch whose outputs do not
    share the inputs' sample axis is dropped whole when any of its samples overlaps."""
    kept, total, overlap = [], 0, 0
    for inputs, outputs in pairs:
        fresh = [d not in data.digests for d in row_digests(inputs)]
        total, overlap = total + len(fresh), overlap + fresh.count(False)
        if all(fresh):
            kept.append((inputs, outputs))
        elif any(fresh) and all(len(v) == len(fresh) for v in outputs.values()):
            idx = np.flatnonzero(fresh)
            kept.append(
                ({k: v[idx] for k, v in inputs.items()}, {k: v[idx] for k, v in outputs.items()})
            )
    return kept, {
        "reference_samples": total,
        "overlapping_samples": overlap,
        "held_out_samples": sum(len(next(iter(p[0].values()))) for p in kept),
    }


def load(calibration_cfg: Any, model_cfg: Any, onnx_path: Path) -> CalibrationSet:
    specs = onnx_model.inputs(onnx_model.load(onnx_path, check=False, weights=False))
    source = calibration_cfg.source
    n, bs, seed = (
        int(calibration_cfg.num_samples),
        int(calibration_cfg.batch_size),
        int(calibration_cfg.seed),
    )
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
    if n < 0 or (n == 0 and source != "directory"):
        raise PipelineError(
            f"invalid config: calibration.num_samples={n}; must be positive for source {source}"
        )
    if source != "directory":
        _check_size(model_cfg, specs, n, bs)
    if source == "directory":
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
        )
        info.update(path=str(calibration_cfg.path))
    elif source == "factory":
        name = calibration_cfg.factory or model_cfg.factory
        if not name:
            raise PipelineError(
                "calibration.source=factory needs calibration.factory or a model factory"
            )
        fn = getattr(_module(name), "calibration_batches", None)
        if fn is None:
            raise PipelineError(
                f"calibration factory '{name}' has no "
                f"calibration_batches(num_samples, batch_size, seed)"
            )
        where = f"{name}.calibration_batches"
        batches = _take(_checked(fn(n, bs, seed), specs, where), n, where)
        info.update(factory=name)
    else:
        where = "random inputs"
        batches = _take(_checked(_random(model_cfg, specs, n, bs, seed), specs, where), n, where)
        info.update(
            random=True,
            note="calibrated on random inputs, not real data: the scales and the accuracy "
            "figures say little about real inputs",
        )
    total = sum(len(next(iter(b.values()))) for b in batches)
    info.update(
        num_samples=total,
        batch_size=max(len(next(iter(b.values()))) for b in batches),
        num_batches=len(batches),
        sha256=data_sha256(batches),
        inputs={
            k: {"dtype": str(v.dtype), "shape": ["N", *v.shape[1:]]} for k, v in batches[0].items()
        },
    )
    if source != "directory":
        info["seed"] = seed
    digests = set().union(*(sample_digests(b) for b in batches))
    return CalibrationSet(batches, info, digests)


def _check_size(model_cfg: Any, specs, n: int, bs: int) -> None:
    """n samples of the model's inputs (at model.sample_dims, one per row) fit in memory."""
    from pipeline.export import sizes

    dims = {**dict(model_cfg.sample_dims), "batch": 1}
    one = sizes.input_bytes(model_cfg, specs, dims, drawn=False)
    if one is not None:
        what = f"{n} calibration samples in batches of {bs}"
        memory.require_memory(one * n, f"calibration.num_samples={n}", what)


def _module(name: str):
    from pipeline.export import factory

    return factory.resolve(name, "calibration factory")


def _random(model_cfg: Any, specs, n: int, bs: int, seed: int) -> Iterable[dict]:
    """Batches of random inputs until n samples: as many per batch as the model's own
    batch dimension allows (a static batch of 1 gives n batches of one sample)."""
    from pipeline.export import export

    rng = np.random.default_rng([seed, RANDOM_STREAM])
    total = 0
    while total < n:
        dims = {**dict(model_cfg.sample_dims), "batch": min(bs, n - total)}
        batch = export.sample_inputs(model_cfg, specs, dims, rng)
        size = len(next(iter(batch.values())))
        if size < 1:
            raise PipelineError("random inputs: the model's batch dimension is 0")
        total += size
        yield batch


def _checked(batches: Iterable[dict], specs, where: str) -> Iterable[dict]:
    for i, b in enumerate(batches):
        check(b, specs, f"{where} batch {i}")
        yield b


def _take(batches: Iterable[dict], n: int, where: str) -> list[dict]:
    out, total = [], 0
    for b in batches:
        size = len(next(iter(b.values())))
        out.append({k: v[: n - total] for k, v in b.items()} if total + size > n else b)
        total += min(size, n - total)
        if total >= n:
            return out
    raise PipelineError(f"calibration.num_samples={n} but {where} gave only {total} samples")


def write_set(dest: Path, batches: list[dict[str, np.ndarray]]) -> Path:
    """One .npz with the batches stacked: how data/calibration/<model>/ was made."""
    names = sorted(batches[0])
    return fileio.write_npz(dest, {k: np.concatenate([b[k] for b in batches]) for k in names})
