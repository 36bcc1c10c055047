"""CalibrationSetFromConfig: the batches that calibrate a Q/DQ graph, checked against
the model's inputs before any calibration runs, with a content hash for the cache.

Sources: `directory` (a folder of .npz files keyed by input name, or <input>.npy files;
the first axis counts samples), `factory` (a module's calibration_batches(num_samples,
batch_size, seed)), `random` (only when asked for by name; it is flagged everywhere).
Files are read without unpickling."""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from pipeline.core import fileio
from pipeline.export import onnx_model
from pipeline.core.errors import PipelineError

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


def sample_digests(batch: dict[str, np.ndarray]) -> set[str]:
    names = sorted(batch)
    out = set()
    for i in range(len(batch[names[0]])):
        h = hashlib.sha256()
        for name in names:
            row = np.ascontiguousarray(batch[name][i])
            h.update(f"{name}|{row.dtype.str}|{row.shape}|".encode())
            h.update(row.tobytes())
        out.add(h.hexdigest())
    return out


def data_sha256(batches: list[dict[str, np.ndarray]]) -> str:
    """Content hash: names, dtypes, shapes and bytes, batch by batch in order."""
    h = hashlib.sha256()
    for b in batches:
        for name in sorted(b):
            a = np.ascontiguousarray(b[name])
            h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def load(calibration_cfg: Any, model_cfg: Any, onnx_path: Path) -> CalibrationSet:
    specs = onnx_model.inputs(onnx_model.load(onnx_path, check=False))
    source = calibration_cfg.source
    n, bs, seed = int(calibration_cfg.num_samples), int(calibration_cfg.batch_size), int(calibration_cfg.seed)
    info: dict[str, Any] = {"source": source, "random": False}
    if source == "none":
        if not model_cfg.factory or not hasattr(_module(model_cfg.factory), "calibration_batches"):
            raise PipelineError(
                f"precision needs calibration data and calibration=none gives none: model '{model_cfg.name}' "
                f"has no factory with calibration_batches(); pick a calibration set (calibration.source="
                f"directory with calibration.path) or set calibration.source=random to calibrate on random data")
        source, n, bs = "factory", FALLBACK_SAMPLES, FALLBACK_BATCH
        info.update(source="factory", fallback="calibration=none: the model factory's calibration_batches()")
    if bs < 1:
        raise PipelineError(f"invalid config: calibration.batch_size={bs}; must be at least 1")
    if n < 0 or (n == 0 and source != "directory"):
        raise PipelineError(f"invalid config: calibration.num_samples={n}; must be positive for source {source}")
    if source == "directory":
        batches = _from_directory(calibration_cfg.path, specs, n, bs)
        info.update(path=str(calibration_cfg.path))
    elif source == "factory":
        name = calibration_cfg.factory or model_cfg.factory
        if not name:
            raise PipelineError("calibration.source=factory needs calibration.factory or a model factory")
        fn = getattr(_module(name), "calibration_batches", None)
        if fn is None:
            raise PipelineError(f"calibration factory '{name}' has no "
                                f"calibration_batches(num_samples, batch_size, seed)")
        where = f"{name}.calibration_batches"
        batches = _take(_checked(fn(n, bs, seed), specs, where), n, where)
        info.update(factory=name)
    else:
        where = "random inputs"
        batches = _take(_checked(_random(model_cfg, specs, n, bs, seed), specs, where), n, where)
        info.update(random=True, note="calibrated on random inputs, not real data: the scales and the accuracy "
                                      "figures say little about real inputs")
    total = sum(len(next(iter(b.values()))) for b in batches)
    info.update(num_samples=total, batch_size=bs, num_batches=len(batches), sha256=data_sha256(batches),
                inputs={k: {"dtype": str(v.dtype), "shape": ["N", *v.shape[1:]]} for k, v in batches[0].items()})
    if source != "directory":
        info["seed"] = seed
    digests = set().union(*(sample_digests(b) for b in batches))
    return CalibrationSet(batches, info, digests)


def _module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise PipelineError(f"calibration factory '{name}' not found ({e})") from None


def _random(model_cfg: Any, specs, n: int, bs: int, seed: int) -> Iterable[dict]:
    from pipeline.export import export

    rng = np.random.default_rng([seed, RANDOM_STREAM])
    for start in range(0, n, bs):
        dims = {**dict(model_cfg.sample_dims), "batch": min(bs, n - start)}
        yield export.sample_inputs(model_cfg, specs, dims, rng)


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


def check(arrays: dict[str, np.ndarray], specs, where: str, batch: bool = True) -> None:
    """Names, dtypes and shapes against the ONNX inputs. Axis 0 counts samples: for one
    batch it must also fit a fixed batch dim; for a whole set (batch=False) it is free."""
    want = {s.name: s for s in specs}
    got = set(arrays)
    if not got & set(want):
        raise PipelineError(f"{where} looks like calibration data for another model: it has inputs "
                            f"{', '.join(sorted(got)) or 'none'}, the model has {', '.join(want)}")
    if got != set(want):
        extra, missing = sorted(got - set(want)), sorted(set(want) - got)
        what = f"unknown input '{extra[0]}'" if extra else f"no array for input '{missing[0]}'"
        raise PipelineError(f"{where} has {what}; the model's inputs are {', '.join(want)}")
    counts, sizes = set(), {}
    for name, spec in want.items():
        a = arrays[name]
        if not isinstance(a, np.ndarray):
            raise PipelineError(f"{where}: input '{name}' is a {type(a).__name__}, not a numpy array")
        if a.dtype != np.dtype(spec.dtype):
            raise PipelineError(f"{where}: input '{name}' is {a.dtype}, the model wants {spec.dtype}")
        if a.ndim != len(spec.dims):
            raise PipelineError(f"{where}: input '{name}' has shape {list(a.shape)}, the model wants rank "
                                f"{len(spec.dims)} {list(spec.dims)}")
        counts.add(a.shape[0])
        for axis, (d, size) in enumerate(zip(spec.dims, a.shape)):
            if axis == 0 and (not batch or not isinstance(d, int)):
                continue
            if isinstance(d, int) and d != size or isinstance(d, str) and sizes.setdefault(d, size) != size:
                raise PipelineError(f"{where}: input '{name}' has shape {list(a.shape)}, which does not fit "
                                    f"the model's {list(spec.dims)} (axis {axis})")
    if len(counts) > 1 or 0 in counts:
        raise PipelineError(f"{where}: inputs hold different or zero sample counts {sorted(counts)}")


def _from_directory(path: str | None, specs, n: int, bs: int) -> list[dict]:
    if not path:
        raise PipelineError("calibration.source=directory needs calibration.path")
    root = Path(path)
    if not root.exists():
        raise PipelineError(f"calibration data not found: {root}")
    files = [root] if root.is_file() else sorted(p for p in root.iterdir() if p.suffix in (".npz", ".npy"))
    if not files:
        raise PipelineError(f"calibration directory {root} has no .npz or .npy files")
    parts: dict[str, list[np.ndarray]] = {}
    for f in files:
        if f.suffix == ".npz":
            arrays = fileio.read_npz(f, "calibration file")
        elif f.suffix == ".npy":
            arrays = {f.stem: _read_npy(f)}
        else:
            raise PipelineError(f"calibration file {f} is neither .npz nor .npy")
        for k, v in arrays.items():
            parts.setdefault(k, []).append(v)
    try:
        arrays = {k: np.concatenate(v) if len(v) > 1 else v[0] for k, v in parts.items()}
    except ValueError as e:
        raise PipelineError(f"calibration files in {root} do not stack along the sample axis: {e}") from None
    check(arrays, specs, f"calibration data {root}", batch=False)
    total = len(next(iter(arrays.values())))
    if n > total:
        raise PipelineError(f"calibration.num_samples={n} but {root} holds only {total} samples")
    n = n or total
    fixed = {s.dims[0] for s in specs if s.dims and isinstance(s.dims[0], int)}
    if fixed and (fixed != {bs} or n % bs):
        raise PipelineError(f"the model has a fixed batch of {min(fixed)}: calibration.batch_size must equal it and "
                            f"divide calibration.num_samples={n}")
    return [{k: v[s: min(s + bs, n)] for k, v in arrays.items()} for s in range(0, n, bs)]


def _read_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise PipelineError(f"calibration file is unreadable: {path} ({e})") from None


def write_set(dest: Path, batches: list[dict[str, np.ndarray]]) -> Path:
    """One .npz with the batches stacked: how data/calibration/<model>/ was made."""
    names = sorted(batches[0])
    return fileio.write_npz(dest, {k: np.concatenate([b[k] for b in batches]) for k in names})
