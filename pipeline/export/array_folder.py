"""ArraysFromFolder: the one loader for folders of arrays keyed by input name, used for
calibration sets (calibration.path) and reference data (model.reference_data) alike.

A folder holds .npz files keyed by input name, or <input>.npy files (or is one .npz);
axis 0 counts samples and files stack along it. Everything is checked against the
model's inputs (names, dtypes, ranks, fixed and shared symbolic dims) and refused with
one line when it does not fit; floats must be finite; nothing is ever unpickled."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np

from pipeline.core import fileio, memory
from pipeline.core.errors import PipelineError


def check(arrays: dict[str, np.ndarray], specs, where: str, batch: bool = True) -> None:
    """Names, dtypes and shapes against the ONNX inputs. Axis 0 counts samples: for one
    batch it must also fit a fixed batch dim; for a whole set (batch=False) it is free."""
    want = {s.name: s for s in specs}
    got = set(arrays)
    if not got & set(want):
        raise PipelineError(
            f"{where} looks like data for another model: it has inputs "
            f"{', '.join(sorted(got)) or 'none'}, the model has {', '.join(want)}"
        )
    if got != set(want):
        extra, missing = sorted(got - set(want)), sorted(set(want) - got)
        what = f"unknown input '{extra[0]}'" if extra else f"no array for input '{missing[0]}'"
        raise PipelineError(f"{where} has {what}; the model's inputs are {', '.join(want)}")
    counts: set[int] = set()
    sizes: dict[str, int] = {}
    for name, spec in want.items():
        a = arrays[name]
        if not isinstance(a, np.ndarray):
            raise PipelineError(
                f"{where}: input '{name}' is a {type(a).__name__}, not a numpy array"
            )
        if a.dtype != np.dtype(spec.dtype):
            raise PipelineError(
                f"{where}: input '{name}' is {a.dtype}, the model wants {spec.dtype}"
            )
        if a.ndim != len(spec.dims):
            raise PipelineError(
                f"{where}: input '{name}' has shape {list(a.shape)}, the model wants rank "
                f"{len(spec.dims)} {list(spec.dims)}"
            )
        counts.add(a.shape[0])
        for axis, (d, size) in enumerate(zip(spec.dims, a.shape)):
            if axis == 0 and (not batch or not isinstance(d, int)):
                continue
            if (isinstance(d, int) and d != size) or (
                isinstance(d, str) and sizes.setdefault(d, size) != size
            ):
                raise PipelineError(
                    f"{where}: input '{name}' has shape {list(a.shape)}, which does not fit "
                    f"the model's {list(spec.dims)} (axis {axis})"
                )
    if len(counts) > 1 or 0 in counts:
        raise PipelineError(
            f"{where}: inputs hold different or zero sample counts {sorted(counts)}"
        )


def data_sha256(batches: list[dict[str, np.ndarray]]) -> str:
    """Content hash: names, dtypes, shapes and bytes, batch by batch in order."""
    h = hashlib.sha256()
    for b in batches:
        for name in sorted(b):
            a = np.ascontiguousarray(b[name])
            h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def read_folder(
    path: str | Path, specs, what: str, count_key: str, n: int, bs: int, key: str | None = None
) -> list[dict]:
    """The first n samples (0: all) of the folder in batches of bs. `what` names the data in
    errors ("calibration data"), `count_key` the setting that asked for n, `key` the one
    that named the folder (count_key when not given)."""
    root = Path(path)
    if not root.exists():
        raise PipelineError(f"{what} not found: {root}")
    files = (
        [root]
        if root.is_file()
        else sorted(p for p in root.iterdir() if p.suffix in (".npz", ".npy"))
    )
    if not files:
        raise PipelineError(f"{what} folder {root} has no .npz or .npy files")
    # Every file is read whole, then stacked (a copy) when there are several.
    need = sum(map(_unpacked_bytes, files)) * (2 if len(files) > 1 else 1)
    memory.require_memory(need, f"{key or count_key}={root}", f"{what} in {len(files)} file(s)")
    parts: dict[str, list[np.ndarray]] = {}
    for f in files:
        if f.suffix == ".npz":
            arrays = fileio.read_npz(f, f"{what} file")
        elif f.suffix == ".npy":
            arrays = {f.stem: _read_npy(f, what)}
        else:
            raise PipelineError(f"{what} file {f} is neither .npz nor .npy")
        for k, v in arrays.items():
            parts.setdefault(k, []).append(v)
    try:
        arrays = {k: np.concatenate(v) if len(v) > 1 else v[0] for k, v in parts.items()}
    except ValueError as e:
        raise PipelineError(
            f"{what} files in {root} do not stack along the sample axis: {e}"
        ) from None
    check(arrays, specs, f"{what} {root}", batch=False)
    for name, a in arrays.items():
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise PipelineError(f"{what} {root}: input '{name}' holds NaN or inf")
    total = len(next(iter(arrays.values())))
    if n > total:
        raise PipelineError(f"{count_key}={n} but {root} holds only {total} samples")
    n = n or total
    fixed = {s.dims[0] for s in specs if s.dims and isinstance(s.dims[0], int)}
    if fixed and (fixed != {bs} or n % bs):
        raise PipelineError(
            f"the model has a fixed batch of {min(fixed)}: the {what} batch size ({bs}) must equal "
            f"it and divide the {n} samples"
        )
    return [{k: v[s : min(s + bs, n)] for k, v in arrays.items()} for s in range(0, n, bs)]


def _unpacked_bytes(path: Path) -> int:
    """Bytes a .npz holds once read (its members unpacked); a .npy's size."""
    if path.suffix == ".npz":
        try:
            with zipfile.ZipFile(path) as z:
                return sum(i.file_size for i in z.infolist())
        except (OSError, zipfile.BadZipFile):
            pass  # reading it says what is wrong
    return path.stat().st_size


def _read_npy(path: Path, what: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise PipelineError(f"{what} file is unreadable: {path} ({e})") from None
