"""Where calibration results are cached (ModelOpt Q/DQ graphs, TensorRT 10 calibration
caches): one folder per user by default, shared by every clone and experiment
workspace that names the same data."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pipeline.core import fileio
from pipeline.core.locations import cache_folder
from pipeline.core.store_entry import FileData, FileOnDisk, Outcome
from pipeline.export import onnx_model

CACHE_ENV = "TRT_PIPELINE_CALIB_CACHE"


def cache_location(calibration_cfg: Any) -> tuple[Path, str]:
    """(folder, what chose it): calibration.cache_dir, $TRT_PIPELINE_CALIB_CACHE, or
    the user cache folder's trt-pipeline/calibration."""
    return cache_folder(getattr(calibration_cfg, "cache_dir", None), CACHE_ENV, "calibration")


def cache_root(calibration_cfg: Any) -> Path:
    return cache_location(calibration_cfg)[0]


def graph_files(model: Any, work: Path, name: str = "model.onnx") -> dict[str, FileData]:
    """A graph as a cache entry's files: the graph's bytes and, past onnx_model's inline
    limit, its one external-data file, written in `work` and left on disk (the store
    copies and hashes it by streaming). Writing empties the in-memory weights."""
    written = onnx_model.save(model, work / name)
    return {name: written[0].read_bytes(), **{p.name: FileOnDisk(p) for p in written[1:]}}


def write_graph(got: Outcome, dest: Path, name: str = "model.onnx") -> None:
    """The entry's graph to `dest` with its external-data files beside it, as copies:
    onnx refuses to load external data through a hard link or a symlink."""
    graph = dest.parent / f".{dest.name}.graph"
    for file in got.names:
        if file.startswith(f"{name}."):  # its external data (onnx_model.save's naming)
            _copy_one(got, file, dest.parent / file)
    _copy_one(got, name, graph)
    graph.replace(dest)  # the graph last: it names data already in place


def _copy_one(got: Outcome, name: str, to: Path) -> None:
    data = got.served.file(name) if got.made is None else got.made[name]
    if isinstance(data, Path):
        shutil.copyfile(data, to)
    elif isinstance(data, FileOnDisk):
        shutil.copyfile(data.path, to)
    else:
        fileio.write_bytes(to, data)
