"""The one loader for folders of arrays keyed by input name, used for
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
from pipeline.core.errors import PipelineError, first_line
from pipeline.graph.onnx_model import ANONYMOUS_DIMS, TensorSpec
from pipeline.inputs import samples

# Arrays in a reference folder that are not inputs: labels for a task metric of the user's
# (precision.gate.metric), one row per sample, carried beside the fp32 outputs.
LABEL_PREFIX = "label:"
# The label a decoder's prefill carries (pipeline/inputs/decoder_runs.py): the prompt's
# next token at each position, -1 after its last; the gate's perplexity reads it.
NEXT_TOKENS = "next_token_ids"


def check(
    arrays: dict[str, np.ndarray],
    specs: list[TensorSpec],
    where: str,
    batch: bool = True,
    axes: samples.Axes | None = None,
) -> None:
    """Names, dtypes and shapes against the ONNX inputs. Each input's sample axis (`axes`,
    axis 0 where not given; None for an input the batch shares) counts samples: for one
    batch it must also fit a fixed dim; for a whole set (batch=False) it is free. Dims
    named `?` or `unk` are anonymous: two of them need not agree."""
    axes = axes if axes is not None else {s.name: (0 if s.dims else None) for s in specs}
    want = {s.name: s for s in specs}
    _check_names(set(arrays), want, where)
    counts: set[int] = set()
    sizes: dict[str, int] = {}
    for name, spec in want.items():
        a = arrays[name]
        _check_array(a, spec, where)
        sample_axis = axes.get(name)
        if sample_axis is not None:
            counts.add(a.shape[sample_axis])
        for axis, (d, size) in enumerate(zip(spec.dims, a.shape)):
            if axis == sample_axis and (not batch or not isinstance(d, int)):
                continue
            if (isinstance(d, int) and d != size) or (
                isinstance(d, str) and d not in ANONYMOUS_DIMS and sizes.setdefault(d, size) != size
            ):
                raise PipelineError(
                    f"{where}: input '{name}' has shape {list(a.shape)}, which does not fit "
                    f"the model's {list(spec.dims)} (axis {axis})"
                )
    if len(counts) > 1 or 0 in counts:
        listed = ", ".join(
            f"{n} axis {a}: {arrays[n].shape[a]}" for n, a in axes.items() if a is not None
        )
        raise PipelineError(
            f"{where}: inputs hold different or zero sample counts ({listed}); where an input "
            f"counts samples on another axis, say which with model.sample_axis (null for one "
            f"the whole batch shares)"
        )


def _check_names(got: set[str], want: dict[str, TensorSpec], where: str) -> None:
    if not got & set(want):
        raise PipelineError(
            f"{where} looks like data for another model: it has inputs "
            f"{', '.join(sorted(got)) or 'none'}, the model has {', '.join(want)}"
        )
    if got != set(want):
        extra, missing = sorted(got - set(want)), sorted(set(want) - got)
        what = f"unknown input '{extra[0]}'" if extra else f"no array for input '{missing[0]}'"
        raise PipelineError(f"{where} has {what}; the model's inputs are {', '.join(want)}")


def _check_array(a: object, spec: TensorSpec, where: str) -> None:
    """A numpy array of the input's dtype and rank."""
    name = spec.name
    if not isinstance(a, np.ndarray):
        raise PipelineError(f"{where}: input '{name}' is a {type(a).__name__}, not a numpy array")
    if a.dtype != np.dtype(spec.dtype):
        raise PipelineError(f"{where}: input '{name}' is {a.dtype}, the model wants {spec.dtype}")
    if a.ndim != len(spec.dims):
        raise PipelineError(
            f"{where}: input '{name}' has shape {list(a.shape)}, the model wants rank "
            f"{len(spec.dims)} {list(spec.dims)}"
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
    path: str | Path,
    specs: list[TensorSpec],
    what: str,
    count_key: str,
    n: int,
    bs: int,
    key: str | None = None,
    axes: samples.Axes | None = None,
    labels: bool = False,
    batch_key: str | None = None,
) -> list[dict[str, np.ndarray]]:
    """The first n samples (0: all) of the folder in batches of bs, along each input's
    sample axis (`axes`: axis 0 where not given; an input the batch shares is the same
    array in every file and every batch). `what` names the data in errors ("calibration
    data"), `count_key` the setting that asked for n, `key` the one that named the folder
    (count_key when not given). labels: arrays keyed `label:<name>` (one row per sample,
    for a task metric of the user's) come along in each batch under their key."""
    axes = axes if axes is not None else {s.name: (0 if s.dims else None) for s in specs}
    root = Path(path)
    parts = _read_files(root, what, key or count_key)
    label_keys = {k for k in parts if labels and k.startswith(LABEL_PREFIX)}
    axes = {**axes, **{k: 0 for k in label_keys}}
    stacked = _stacked(parts, axes, f"{what} files in {root}")
    arrays = {k: v for k, v in stacked.items() if k not in label_keys}
    check(arrays, specs, f"{what} {root}", batch=False, axes=axes)
    for name, a in arrays.items():
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise PipelineError(f"{what} {root}: input '{name}' holds NaN or inf")
    total = samples.count(arrays, axes)
    for k in label_keys:
        if not stacked[k].ndim or len(stacked[k]) != total:
            raise PipelineError(
                f"{what} {root}: '{k}' has {len(stacked[k]) if stacked[k].ndim else 0} rows, "
                f"the inputs hold {total} samples; a label array has one row per sample"
            )
    if n > total:
        raise PipelineError(f"{count_key}={n} but {root} holds only {total} samples")
    n = n or total
    _check_fixed_batch(specs, axes, bs, n, what, batch_key)
    return samples.split(stacked, axes, n, bs)


def _read_files(root: Path, what: str, key: str) -> dict[str, list[np.ndarray]]:
    """Every .npz/.npy file of the folder (or the one file), array by name, in file order."""
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
    memory.require_memory(need, f"{key}={root}", f"{what} in {len(files)} file(s)")
    parts: dict[str, list[np.ndarray]] = {}
    for f in files:
        if f.suffix == ".npz":
            arrays = fileio.read_npz(f, f"{what} file")
        elif f.suffix == ".npy":
            arrays = {f.stem: read_npy(f, what)}
        else:
            raise PipelineError(f"{what} file {f} is neither .npz nor .npy")
        for k, v in arrays.items():
            parts.setdefault(k, []).append(v)
    return parts


def _check_fixed_batch(
    specs: list[TensorSpec], axes: samples.Axes, bs: int, n: int, what: str, key: str | None
) -> None:
    """A model whose sample axis is fixed takes batches of exactly that many samples; the
    line names the setting (`key`) that sets the batch size."""
    fixed = {
        int(dim)
        for s in specs
        if (axis := axes.get(s.name)) is not None and isinstance(dim := s.dims[axis], int)
    }
    if fixed and (fixed != {bs} or n % bs):
        setting = f"; set {key}={min(fixed)}" if key and fixed != {bs} else ""
        raise PipelineError(
            f"the model has a fixed batch of {min(fixed)}: the {what} batch size ({bs}) must equal "
            f"it and divide the {n} samples{setting}"
        )


def _stacked(
    parts: dict[str, list[np.ndarray]], axes: samples.Axes, where: str
) -> dict[str, np.ndarray]:
    """Each input's files joined along its sample axis; a shared input must be one array."""
    out: dict[str, np.ndarray] = {}
    for name, arrays in parts.items():
        axis = axes.get(name, 0)
        if axis is None:
            if any(not np.array_equal(arrays[0], a) for a in arrays[1:]):
                raise PipelineError(
                    f"{where} hold different values of input '{name}', which every sample "
                    f"shares (model.sample_axis.{name} is null, or it has rank 0)"
                )
            out[name] = arrays[0]
            continue
        try:
            out[name] = np.concatenate(arrays, axis=axis) if len(arrays) > 1 else arrays[0]
        except (ValueError, np.exceptions.AxisError) as e:
            raise PipelineError(
                f"{where} do not stack along the sample axis: {first_line(e)}; files of "
                f"other shapes (a decoder's prefill and decode steps) are other sets: give "
                f"a decoder's prompts instead (model.prompts, calibration=prompts)"
            ) from None
    return out


def _unpacked_bytes(path: Path) -> int:
    """Bytes a .npz holds once read (its members unpacked); a .npy's size."""
    if path.suffix == ".npz":
        try:
            with zipfile.ZipFile(path) as z:
                return sum(i.file_size for i in z.infolist())
        except (OSError, zipfile.BadZipFile):
            pass  # reading it says what is wrong
    return path.stat().st_size


def read_npy(path: Path, what: str) -> np.ndarray:
    try:
        # a .npy file gives one array (numpy's stub says Any: np.load also opens .npz)
        array: np.ndarray = np.load(path, allow_pickle=False)
        return array
    except (ValueError, OSError, EOFError) as e:
        raise PipelineError(f"{what} file is unreadable: {path} ({e})") from None
