"""Reading and checking ONNX files: one place that turns onnx's many exception
types into a PipelineError that names the file."""

from __future__ import annotations

import collections
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.errors import PipelineError, first_line

Dim = int | str | None  # fixed size, symbolic name, or unknown


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # numpy dtype name
    dims: tuple[Dim, ...]


def load(path: str | Path, check: bool = True):
    import onnx

    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"ONNX model not found: {path}")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # protobuf DecodeError, external data errors, ...
        raise PipelineError(f"ONNX model {path} is unreadable: {first_line(e)}") from None
    if check:
        try:
            onnx.checker.check_model(str(path), full_check=True)
        except Exception as e:
            raise PipelineError(
                f"ONNX model {path} fails the ONNX checker: {first_line(e)}"
            ) from None
    return model


def _dims(value_info) -> tuple[Dim, ...]:
    shape = value_info.type.tensor_type.shape
    out: list[Dim] = []
    for d in shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append(str(d.dim_param))
        else:
            out.append(None)
    return tuple(out)


def _dtype(value_info) -> str:
    import onnx

    elem = value_info.type.tensor_type.elem_type
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem))
    except Exception:
        return onnx.TensorProto.DataType.Name(elem).lower()


def inputs(model) -> list[TensorSpec]:
    """Graph inputs that are fed at run time (initializers listed as inputs are not)."""
    inits = {i.name for i in model.graph.initializer}
    return [
        TensorSpec(v.name, _dtype(v), _dims(v)) for v in model.graph.input if v.name not in inits
    ]


def outputs(model) -> list[TensorSpec]:
    return [TensorSpec(v.name, _dtype(v), _dims(v)) for v in model.graph.output]


def op_histogram(model) -> dict[str, int]:
    counts = collections.Counter(
        f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
        for n in model.graph.node
    )
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def parameter_count(model) -> int:
    import numpy as np

    total = 0
    for init in model.graph.initializer:
        total += int(np.prod(init.dims)) if len(init.dims) else 1
    return total


def opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def external_data_files(model, base: Path) -> list[Path]:
    from onnx.external_data_helper import uses_external_data

    files = set()
    for init in model.graph.initializer:
        if uses_external_data(init):
            loc = next((e.value for e in init.external_data if e.key == "location"), None)
            if loc:
                files.add(base / loc)
    return sorted(files)


def files_and_sha256(path: str | Path) -> tuple[list[Path], str]:
    """The model file and every external-data file it names, and one hash over all of
    them (a change to weights kept outside the .onnx changes it), each read once."""
    path = Path(path)
    data = path.read_bytes()
    h = hashlib.sha256(data)
    # Every external-data entry carries the key "location"; without those bytes
    # there is none, and the hit path of the engine store need not import onnx.
    if b"location" not in data:
        return [path], h.hexdigest()
    import onnx

    externals = external_data_files(onnx.load_model_from_string(data), path.parent)
    for ext in externals:
        try:
            payload = ext.read_bytes()
        except FileNotFoundError:
            raise PipelineError(
                f"external-data file {ext} named by {path.name} not found"
            ) from None
        h.update(ext.name.encode())
        h.update(payload)
    return [path, *externals], h.hexdigest()


def sha256(path: str | Path) -> str:
    return files_and_sha256(path)[1]


def file_stats(files: list[Path]) -> dict:
    """Size and mtime of each file of a graph a stage just wrote and hashed, recorded
    beside that hash so the next stage can take it without reading every weight again."""
    return {f.name: {"bytes": (st := f.stat()).st_size, "mtime_ns": st.st_mtime_ns} for f in files}


def recorded_sha256(path: str | Path, digest: Any, stats: Any) -> str:
    """`digest`, the graph's recorded hash, while every file `file_stats` recorded still
    has its size and mtime (the rule git and DVC apply to unchanged files), else the
    graph read and hashed again. A graph written over in place changes its mtime."""
    path = Path(path)
    if (
        isinstance(digest, str)
        and len(digest) == 64
        and isinstance(stats, dict)
        and path.name in stats
        and all(_unchanged(path.parent, n, f) for n, f in stats.items())
    ):
        return digest
    return sha256(path)


def _unchanged(folder: Path, name: Any, rec: Any) -> bool:
    if not isinstance(name, str) or "/" in name or name in (".", "..") or not isinstance(rec, dict):
        return False
    try:
        st = (folder / name).stat()
    except OSError:
        return False
    return rec.get("bytes") == st.st_size and rec.get("mtime_ns") == st.st_mtime_ns
