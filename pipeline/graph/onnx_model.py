"""Reading and checking ONNX files: one place that turns onnx's many exception
types into a PipelineError that names the file."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pipeline.core.errors import PipelineError, first_line

if TYPE_CHECKING:
    from onnx import ModelProto, NodeProto

Dim = int | str | None  # fixed size, symbolic name, or unknown
# Dim names exporters write for "some size" (tf2onnx, jax2tf, hand-edited files): two axes
# named so need not be the same size, and no size said for one applies to the other.
ANONYMOUS_DIMS = frozenset({"?", "unk", "-1", ""})


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # numpy dtype name
    dims: tuple[Dim, ...]


def load(path: str | Path, check: bool = True, weights: bool = True) -> ModelProto:
    """The model; weights=False leaves weights kept in external data on disk (their
    tensors name the file), so a graph of many GB is read as a few KB."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"ONNX model not found: {path}")
    try:
        model = onnx.load(str(path), load_external_data=weights)
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


# Weights past this go to one external-data file beside the graph: a protobuf message
# cannot exceed 2 GB, a graph file without weights is cheap to parse and hash, and the
# transforms stream a model whose weights are in external data (calibration.streaming=auto):
# through ModelOpt an inline 0.74 GB encoder's int8 calibration peaked at 15x its bytes,
# so the limit keeps that path to models whose 15x a workstation has to spare.
# $TRT_PIPELINE_ONNX_INLINE_LIMIT (bytes) lowers it, so tests take that path on small models.
INLINE_LIMIT = 256 << 20
INLINE_LIMIT_ENV = "TRT_PIPELINE_ONNX_INLINE_LIMIT"


def inline_limit() -> int:
    return int(os.environ.get(INLINE_LIMIT_ENV) or INLINE_LIMIT)


def weight_bytes(model: ModelProto) -> int:
    """Bytes the model's initializers hold in memory (external ones count nothing)."""
    total = 0
    for t in model.graph.initializer:
        total += len(t.raw_data) + 4 * (len(t.float_data) + len(t.int32_data))
        total += 8 * (len(t.int64_data) + len(t.double_data)) + sum(map(len, t.string_data))
    return total


# ONNX's 4-bit types, packed two values a byte: UINT4, INT4, FLOAT4E2M1
PACKED_4BIT = (21, 22, 23)


def tensor_bytes(tensor: Any, data_type: int | None = None) -> int:
    """The bytes a tensor's values take wherever they are kept (in the graph or in an
    external-data file): its elements times their size, 4-bit types two a byte; with
    `data_type`, the bytes they take stored in that type. A string tensor counts nothing:
    it is never a weight."""
    import numpy as np
    from onnx import helper

    n = int(np.prod(tensor.dims, dtype=np.int64))
    kind = tensor.data_type if data_type is None else data_type
    if kind in PACKED_4BIT:
        return (n + 1) // 2
    try:
        return n * int(np.dtype(helper.tensor_dtype_to_np_dtype(kind)).itemsize)
    except (TypeError, KeyError, ValueError):  # a string tensor
        return 0


def save(model: ModelProto, path: str | Path) -> list[Path]:
    """Write `model` to path: inline below INLINE_LIMIT, else its weights in one file
    `<name>.data` beside it (onnx.save_model's external data; the in-memory tensors are
    emptied as they are written, so nothing is held twice). Each file appears by a
    rename; the files written."""
    import onnx

    from pipeline.core import fileio

    path = Path(path)
    if weight_bytes(model) < inline_limit():
        fileio.write_bytes(path, model.SerializeToString())
        return [path]
    location = _free_location(model, path.name)
    _raw_data(model, EXTERNAL_THRESHOLD)
    tmp = fileio.mkdtemp(f".{path.name}.", path.parent)
    written = [path]
    try:
        onnx.save_model(
            model,
            str(tmp / path.name),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=location,
            size_threshold=EXTERNAL_THRESHOLD,
        )
        if (tmp / location).exists():  # none is written when every tensor is small
            # onnx creates it owner-only (0600): a team sharing the artifacts reads it too
            os.chmod(tmp / location, fileio.file_mode())
            os.replace(tmp / location, path.parent / location)
            written.append(path.parent / location)
        os.replace(tmp / path.name, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written


def _free_location(model: ModelProto, name: str) -> str:
    """`<name>.data`, or `<name>.<n>.data` where the graph's external tensors already name
    that file (a graph rewritten beside its own data): writing it would clobber them."""
    taken = external_locations(model)
    location, n = f"{name}.data", 1
    while location in taken:
        location, n = f"{name}.{n}.data", n + 1
    return location


EXTERNAL_THRESHOLD = 1024  # bytes: a smaller tensor stays in the graph


def _raw_data(model: ModelProto, threshold: int) -> None:
    """Each in-memory tensor of `threshold` bytes or more held in raw_data: onnx moves only
    raw_data to an external file, and an exporter may write weights in the typed fields
    (float_data, int64_data: Paddle's Constant nodes, once made initializers, come so)."""
    from onnx import numpy_helper

    for t in model.graph.initializer:
        typed = 4 * (len(t.float_data) + len(t.int32_data)) + 8 * (
            len(t.int64_data) + len(t.double_data)
        )
        if typed >= threshold:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))


def save_copy(model: ModelProto, path: str | Path) -> list[Path]:
    """save() of a copy, leaving `model`'s in-memory weights in place (held twice while
    it writes: only for a graph whose weights a transform rewrote in memory)."""
    import onnx

    if weight_bytes(model) < inline_limit():
        return save(model, path)  # inline: serialising leaves the model as it is
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return save(copy, path)


@contextlib.contextmanager
def unnamed_dims_named(model: ModelProto) -> Iterator[None]:
    """Within the block, each graph input's dynamic axis without a name is named
    `<input>_axis<N>` (a tool that wants a name or a number gets one); restored after."""
    named = []
    for vi in model.graph.input:
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if not d.dim_param and d.dim_value <= 0:
                d.dim_param = f"{vi.name}_axis{axis}"
                named.append(d)
    try:
        yield
    finally:
        for d in named:
            d.ClearField("dim_param")


def drop_intermediate_shapes(model: ModelProto) -> None:
    """Remove the shape annotations of intermediate tensors (graph.value_info) a transform
    left. ONNX Runtime's memory planner trusts them: where AutoCast named two different
    unknown sizes alike (`unk`), it reused a buffer of the wrong size at run time (YOLOv8
    and jax2tf exports in fp16). Every runtime infers them again from the inputs; dropped,
    the graph's bytes also no longer depend on the order a transform listed them in."""
    del model.graph.value_info[:]


def _dims(value_info: Any) -> tuple[Dim, ...]:
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


def _dtype(value_info: Any) -> str:
    import onnx

    elem = value_info.type.tensor_type.elem_type
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem))
    except Exception:
        return str(onnx.TensorProto.DataType.Name(elem)).lower()


def inputs(model: ModelProto) -> list[TensorSpec]:
    """Graph inputs that are fed at run time (initializers listed as inputs are not)."""
    inits = {i.name for i in model.graph.initializer}
    return [
        TensorSpec(v.name, _dtype(v), _dims(v)) for v in model.graph.input if v.name not in inits
    ]


def outputs(model: ModelProto) -> list[TensorSpec]:
    return [TensorSpec(v.name, _dtype(v), _dims(v)) for v in model.graph.output]


def subgraphs(node: Any) -> Iterator[tuple[str, Any]]:
    """Each subgraph a node holds (an If's branches, a Loop's or Scan's body), named by its
    attribute ("then_branch"; "<attribute>.<i>" in a list): unique among the node's, where
    the graphs' own names may not be (both branches of an exported If are "sub_graph")."""
    from onnx import AttributeProto

    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from ((f"{attr.name}.{i}", g) for i, g in enumerate(attr.graphs))


def producers(model: ModelProto) -> dict[str, NodeProto]:
    """Tensor name -> the node that writes it."""
    return {o: n for n in model.graph.node for o in n.output}


def readers(model: ModelProto) -> dict[str, list[NodeProto]]:
    """Tensor name -> the nodes that read it, in graph order (once per input slot)."""
    out: dict[str, list[NodeProto]] = collections.defaultdict(list)
    for n in model.graph.node:
        for x in n.input:
            out[x].append(n)
    return out


def op_histogram(model: ModelProto) -> dict[str, int]:
    counts = collections.Counter(
        f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
        for n in model.graph.node
    )
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def parameter_count(model: ModelProto) -> int:
    import numpy as np

    total = 0
    for init in model.graph.initializer:
        total += int(np.prod(init.dims)) if len(init.dims) else 1
    return total


def opset(model: ModelProto) -> int:
    """The version of the default (ai.onnx) domain the graph imports; 0 where it names none."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def external_data_files(model: ModelProto, base: Path) -> list[Path]:
    return sorted({base / loc for loc in external_locations(model)})


def external_locations(model: ModelProto) -> set[str]:
    """The external-data locations the graph's initializers name, as written."""
    from onnx.external_data_helper import uses_external_data

    return {
        e.value
        for init in model.graph.initializer
        if uses_external_data(init)
        for e in init.external_data
        if e.key == "location" and e.value
    }


def files_and_sha256(path: str | Path) -> tuple[list[Path], str]:
    """The model file and every external-data file it names, and one hash over all of
    them (a change to weights kept outside the .onnx changes it), each streamed once:
    a model of several GB is never held in memory to be hashed."""
    path = Path(path)
    h = hashlib.sha256()
    named = _stream(path, h, b"location")
    # Every external-data entry carries the key "location"; without those bytes
    # there is none, and the hit path of the engine store need not import onnx.
    if not named:
        return [path], h.hexdigest()
    import onnx

    externals = external_data_files(onnx.load(str(path), load_external_data=False), path.parent)
    for ext in externals:
        h.update(ext.name.encode())
        try:
            _stream(ext, h)
        except FileNotFoundError:
            raise PipelineError(
                f"external-data file {ext} named by {path.name} not found"
            ) from None
    return [path, *externals], h.hexdigest()


class _Hash(Protocol):
    """A hashlib hash, as far as _stream feeds it."""

    def update(self, data: bytes, /) -> None: ...


def _stream(path: Path, h: _Hash, look_for: bytes = b"", chunk: int = 1 << 20) -> bool:
    """Feed the file to `h` block by block; whether `look_for` occurs in it (across blocks too)."""
    found, tail = False, b""
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
            if look_for and not found:
                found = look_for in tail + block
                tail = block[-len(look_for) :]
    return found


def sha256(path: str | Path) -> str:
    return files_and_sha256(path)[1]


def file_stats(files: list[Path]) -> dict[str, dict[str, int]]:
    """Size and mtime of each file of a graph a stage just wrote and hashed, recorded
    beside that hash so the next stage can take it without reading every weight again."""
    return {f.name: {"bytes": (st := f.stat()).st_size, "mtime_ns": st.st_mtime_ns} for f in files}


def recorded_sha256(path: str | Path, digest: object, stats: object) -> str:
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


def _unchanged(folder: Path, name: object, rec: object) -> bool:
    if not isinstance(name, str) or "/" in name or name in (".", "..") or not isinstance(rec, dict):
        return False
    try:
        st = (folder / name).stat()
    except OSError:
        return False
    return rec.get("bytes") == st.st_size and rec.get("mtime_ns") == st.st_mtime_ns
