"""Writing a graph whose weights are partly in memory and partly in another graph's
external-data files (a transform's result that keeps some source weights by reference):
one data file beside the graph, filled one tensor at a time.

onnx.save_model cannot do this: it writes the tensors it holds and leaves a tensor that
already names an external file pointing at that file, which is beside the source, not
beside the result. Loading every weight first would hold the model in memory, which is
what a streamed transform exists to avoid."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core import fileio
from pipeline.core.errors import PipelineError

if TYPE_CHECKING:
    import numpy as np
    from onnx import ModelProto

SMALL = 1024  # bytes: smaller tensors stay in the graph (onnx.save_model's size_threshold)


def write_gathered(model: ModelProto, base: Path | None, path: Path) -> list[Path]:
    """Write `model` to path with its weights in `<name>.data` beside it: each in-memory
    tensor of SMALL bytes or more, and each tensor kept in an external-data file of
    `base`, copied across. The model's tensors name the new file afterwards. Each file
    appears by a rename; the files written."""
    with Gathered(path, base) as gathered:
        return gathered.finish(model)


class Gathered:
    """write_gathered one tensor at a time: add() moves a tensor's bytes into the data
    file as soon as it is made (it keeps only the file's name and place), so that a graph
    built tensor by tensor never holds their bytes; finish() adds the model's other
    tensors and writes the graph. Nothing appears at `path` before finish(); leaving the
    block removes what an unfinished writer wrote."""

    def __init__(self, path: Path, base: Path | None) -> None:
        self.path, self.base = path, base
        self.location = f"{path.name}.data"
        self.added: set[str] = set()

    def __enter__(self) -> Gathered:
        self.tmp = fileio.mkdtemp(f".{self.path.name}.", self.path.parent)
        self.out = open(self.tmp / self.location, "wb")  # closed by __exit__ or finish
        return self

    def __exit__(self, *exc: object) -> None:
        self.out.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def add(self, t: Any) -> None:
        """`t`'s bytes into the data file (from memory, or from its file in `base`); `t`
        names them there afterwards."""
        from onnx.external_data_helper import uses_external_data

        data = external_bytes(t, self.base) if uses_external_data(t) else held_bytes(t)
        offset = self.out.tell()
        self.out.write(data)
        point_at(t, self.location, offset, len(data))
        self.added.add(t.name)

    @staticmethod
    def takes(t: Any) -> bool:
        """Whether `t` goes to the data file: it names one already, or it is SMALL bytes or
        more (smaller ones stay in the graph, where shape inference reads them)."""
        from onnx.external_data_helper import uses_external_data

        return bool(uses_external_data(t)) or t.ByteSize() >= SMALL

    def finish(self, model: ModelProto) -> list[Path]:
        """Add each tensor of `model` not added yet (in memory and SMALL bytes or more, or
        in `base`'s files), write the graph and move both files into place."""
        for t in model.graph.initializer:
            if t.name not in self.added and self.takes(t):
                self.add(t)
        self.out.close()
        fileio.write_bytes(self.tmp / self.path.name, model.SerializeToString())
        os.replace(self.tmp / self.location, self.path.parent / self.location)
        os.replace(self.tmp / self.path.name, self.path)
        return [self.path, self.path.parent / self.location]


def held_bytes(t: Any) -> bytes:
    """An in-memory tensor's bytes as raw_data holds them, whichever field keeps them."""
    from onnx import numpy_helper

    return bytes(t.raw_data or numpy_helper.from_array(numpy_helper.to_array(t)).raw_data)


def point_at(t: Any, location: str, offset: int, length: int) -> None:
    """`t` without its in-memory values, naming `length` bytes at `offset` of `location`."""
    for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
        t.ClearField(field)
    del t.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = t.external_data.add()
        entry.key, entry.value = key, str(value)
    t.data_location = 1  # TensorProto.EXTERNAL


def _external_slice(t: Any, base: Path | None) -> tuple[Path, int, int]:
    """(file, offset, length; -1: to the end) of a tensor's external data in `base`; a
    location that leaves `base` (or a file that is not there) is refused."""
    info = {e.key: e.value for e in t.external_data}
    if base is None or "location" not in info:
        raise PipelineError(f"weight {t.name!r} names external data the tool cannot find")
    root = base.resolve()
    file = (root / info["location"]).resolve()
    if not file.is_relative_to(root) or not file.is_file():
        raise PipelineError(
            f"weight {t.name!r} names external data {info['location']!r} outside {base} or missing"
        )
    return file, int(info.get("offset", 0)), int(info["length"]) if "length" in info else -1


def _truncated(t: Any, file: Path) -> PipelineError:
    return PipelineError(f"external data of weight {t.name!r} in {file} is truncated")


def external_bytes(t: Any, base: Path | None) -> bytes:
    """A tensor's bytes from its external-data file in `base` (checked as _external_slice
    says)."""
    file, offset, length = _external_slice(t, base)
    with open(file, "rb") as f:
        f.seek(offset)
        data = f.read(length)
    if length >= 0 and len(data) != length:
        raise _truncated(t, file)
    return data


def mapped_apart(tensor: Any, base: Path | None) -> np.ndarray:
    """A weight's values as read_apart gives them, but a plain numeric tensor in external
    data is mapped from its file, not read: only the pages a caller touches are read.
    tied_weights compares a row of each same-shaped pair first: with whole tensors read, a
    2.2 GB model of 200 same-shaped tables read each one beside every other (440 GB from
    the page cache, 37 s of a 41 s export)."""
    import numpy as np
    from onnx import helper
    from onnx.external_data_helper import uses_external_data

    if not (uses_external_data(tensor) and tensor.data_type in PLAIN_TYPES):
        return read_apart(tensor, base)
    file, offset, length = _external_slice(tensor, base)
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    shape = tuple(int(d) for d in tensor.dims)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if (length >= 0 and length != size) or offset + size > file.stat().st_size:
        raise _truncated(tensor, file)
    if size == 0:
        return np.zeros(shape, dtype)
    return np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=shape)


def read_apart(tensor: Any, base: Path | None, to_array: Any = None) -> np.ndarray:
    """A weight's values without touching the tensor that names them: onnx's
    numpy_helper.to_array loads external bytes into the tensor it is given, and so into the
    model holding it, which would bring the whole model into memory one weight at a time. A
    plain numeric tensor in external data is read from its file slice straight into numpy
    (no protobuf copy of its bytes on the way); anything else goes through a copy of the
    tensor. `to_array`: onnx's own, where it is replaced (autocast/streamed.py's reads_apart)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper
    from onnx.external_data_helper import uses_external_data

    read = to_array or numpy_helper.to_array
    if uses_external_data(tensor) and tensor.data_type in PLAIN_TYPES:
        dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
        data = external_bytes(tensor, base)
        return np.frombuffer(data, dtype=dtype).reshape(tuple(tensor.dims))
    if uses_external_data(tensor):
        apart = onnx.TensorProto()
        apart.CopyFrom(tensor)  # metadata and the file's name: no weight bytes
        tensor = apart
    try:
        return read(tensor, base_dir=str(base) if base is not None else "")
    except Exception as e:
        raise PipelineError(f"cannot read weight {tensor.name!r} of the model: {e}") from None


# TensorProto types numpy holds as they are stored (little-endian, one element per item)
PLAIN_TYPES = (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13)
