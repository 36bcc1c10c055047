"""Where calibration results are cached (ModelOpt Q/DQ graphs, TensorRT 10 calibration
caches): one folder per user by default, shared by every clone and experiment
workspace that names the same data."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from pipeline.core import console, fileio, hashing
from pipeline.graph import onnx_model
from pipeline.machine.fingerprint import transform_library_versions
from pipeline.precision.common.figures_memo import FiguresMemo
from pipeline.store import CALIBRATION, FileData, FileOnDisk, Outcome, VerifiedStore

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.core.config import CalibrationConfig

# The versions of the libraries a transform's result depends on, by distribution name
# (machine.fingerprint.TRANSFORM_LIBRARIES): part of AutoCast's and int4's cache keys.
LibraryVersions = TypedDict(
    "LibraryVersions", {"nvidia-modelopt": str, "onnx": str, "onnxruntime": str}
)


def library_versions() -> LibraryVersions:
    """machine.fingerprint.transform_library_versions(), whose keys are TRANSFORM_LIBRARIES."""
    return cast("LibraryVersions", transform_library_versions())


# What a cache miss runs: (the entry's files, its labels, the event a summary records).
Make = Callable[[], tuple[Mapping[str, FileData], dict[str, Any], str]]


def store(
    calibration_cfg: CalibrationConfig, required: tuple[str, ...] = ("model.onnx",)
) -> VerifiedStore:
    """The calibration cache (calibration.cache_dir, else $TRT_PIPELINE_CALIB_CACHE, else the
    user cache folder): Q/DQ and AutoCast graphs, and fallback searches (with search.json)."""
    root = CALIBRATION.root(calibration_cfg.cache_dir)
    return VerifiedStore(root, required=required, what="calibration cache")


def figures_memo(calibration_cfg: CalibrationConfig, inputs: Mapping[str, Any]) -> FiguresMemo:
    """The figures searches keyed by `inputs` (a search's key less its gate) measured before,
    kept in this cache (precision/common/figures_memo.py)."""
    return FiguresMemo(
        store(calibration_cfg, required=(FiguresMemo.FILE,)),
        hashing.sha256_json(inputs),
        {k: v for k, v in inputs.items() if k != "gate"},
    )


_SAID: set[str] = set()  # why a cache refused an entry, said once per process


def cached(
    calibration_cfg: CalibrationConfig,
    key: str,
    make: Make,
    what: str,
    required: tuple[str, ...] = ("model.onnx",),
) -> tuple[Outcome, dict[str, Any]]:
    """get_or_make on the calibration cache, and the record a summary keeps of it (key,
    hit, a corrupt entry replaced). One computation per key at a time: a concurrent run
    waits, then hits. A read-only cache still serves; a miss is then made and not kept."""
    got = store(calibration_cfg, required).get_or_make(key, make)
    if got.not_stored and got.not_stored not in _SAID:
        # once per run: a read-only cache refuses every entry of a stage alike
        _SAID.add(got.not_stored)
        console.warn(f"{got.not_stored}; the {what} is not cached (nor what follows it)")
    record: dict[str, Any] = {"key": key, "hit": got.hit}
    if got.damage:
        record["replaced_corrupt_entry"] = "; ".join(got.damage)
    return got, record


def graph_files(model: ModelProto, work: Path, name: str = "model.onnx") -> dict[str, FileData]:
    """A graph as a cache entry's files: the graph's bytes and, past onnx_model's inline
    limit, its one external-data file, written in `work` and left on disk (the store
    copies and hashes it by streaming). Writing empties the in-memory weights."""
    return entry_files(onnx_model.save(model, work / name)[0], name)


def entry_files(path: Path, name: str = "model.onnx") -> dict[str, FileData]:
    """The graph file at `path` (stored as `name`) and the external-data files it names,
    which stay on disk."""
    graph = path.read_bytes()
    externals = onnx_model.external_data_files(_graph(graph), path.parent)
    return {name: graph, **{p.name: FileOnDisk(p) for p in externals}}


def _graph(data: bytes) -> Any:
    import onnx

    return onnx.load_from_string(data)


def _folder(got: Outcome) -> Path | None:
    """Where the entry's external-data files are: the entry, or where they were made."""
    if got.made is None:
        return got.served.path
    return next((d.path.parent for d in got.made.values() if isinstance(d, FileOnDisk)), None)


def write_graph(got: Outcome, dest: Path, name: str = "model.onnx") -> None:
    """The entry's graph to `dest` with its external-data files beside it, as copies:
    onnx refuses to load external data through a hard link or a symlink."""
    graph = got.read(name)
    for ext in onnx_model.external_data_files(_graph(graph), dest.parent):
        _copy_one(got, ext.name, ext)
    fileio.write_bytes(dest, graph)  # the graph last: it names data already in place


def read_graph(got: Outcome, name: str = "model.onnx") -> Any:
    """The entry's graph with its small external tensors (scales, zero points) read in;
    weights stay on disk."""
    return _with_small_tensors(_graph(got.read(name)), _folder(got))


def read_whole_graph(got: Outcome, name: str = "model.onnx") -> Any:
    """The entry's graph with every weight read in: an int4 graph's weights (ModelOpt's
    rewrites some under new names) would otherwise live in the entry's folder while the
    source's live in another, and a graph written from both names one folder."""
    return _with_small_tensors(_graph(got.read(name)), _folder(got), limit=None)


def read_graph_at(path: Path) -> Any:
    return _with_small_tensors(onnx_model.load(path, check=False, weights=False), path.parent)


def _with_small_tensors(model: ModelProto, base: Path | None, limit: int | None = 1 << 20) -> Any:
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    for t in model.graph.initializer:
        if base is not None and uses_external_data(t):
            length = next((int(e.value) for e in t.external_data if e.key == "length"), None)
            if limit is None or (length is not None and length <= limit):
                load_external_data_for_tensor(t, str(base))
                t.data_location = 0  # DEFAULT: the bytes are in raw_data now
                del t.external_data[:]
    return model


def copy_external(model: ModelProto, base: Path, folder: Path) -> list[Path]:
    """Copies in `folder` of the external-data files `model` names in `base`."""
    out = []
    for ext in onnx_model.external_data_files(model, base):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ext, folder / ext.name)
        out.append(folder / ext.name)
    return out


def save_beside(model: ModelProto, dest: Path, base: Path) -> None:
    """Write `model` to dest. A graph naming external-data files in `base` gets one data
    file of its own holding those weights and the ones it holds in memory, copied one
    tensor at a time (the weights it no longer reads are not copied; a file name of the
    source cannot collide with dest's); a graph of inline weights is written as
    onnx_model.save writes it. The model's tensors name dest's file afterwards."""
    from pipeline.graph.external_data import write_gathered
    from pipeline.precision.common import streamed

    if streamed.external_data(model):
        write_gathered(model, base, dest)
    else:
        onnx_model.save(model, dest)


def _copy_one(got: Outcome, name: str, to: Path) -> None:
    data = got.served.file(name) if got.made is None else got.made[name]
    if isinstance(data, Path):
        shutil.copyfile(data, to)
    elif isinstance(data, FileOnDisk):
        shutil.copyfile(data.path, to)
    else:
        fileio.write_bytes(to, data)
