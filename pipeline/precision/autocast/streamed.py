"""AutoCast (fp16/bf16) in bounded memory (calibration.streaming): ModelOpt's own node
classifier and precision converter, run on the graph read without its weights.

ModelOpt's convert_to_mixed_precision loads every weight, then its reference runner
copies the model for ONNX Runtime (Polygraphy marks every tensor an output) and shape
inference copies it again: 8.6x the model's bytes on a 0.74 GB encoder. The steps here
are its steps (graph sanitizer, type inference, NodeClassifier, PrecisionConverter, in
ModelOpt 0.47's order) with two changes:
- The reference data are TensorStats (max |x|, min, max, shape per tensor: all the
  classifier's rules read) from one ONNX Runtime session that reads the weights from
  their files, instead of every tensor's values.
- The weights stay in files. ModelOpt reads an initializer with
  numpy_helper.to_array(tensor), which resolves external data against the working
  directory, so the classifier and converter run in a folder holding copies of the
  model's data files (working_directory below). Each weight is read when it is converted and its
  fp16 copy goes straight to a data file of its own (StreamedConverter), so the graph the
  converter keeps inferring types on never holds a weight: ModelOpt's shape inference and
  copies of the model cost the graph's size, not the weights'.
The tests compare the result with convert_to_mixed_precision's, node for node and weight
for weight."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core import console
from pipeline.core.errors import PipelineError
from pipeline.precision.autocast.linear_cleanup import linear_cleanup

if TYPE_CHECKING:
    from modelopt.onnx.autocast.referencerunner import TensorStats
    from onnx import ModelProto

    from pipeline.core.config import PrecisionConfig


CAST_DATA = "autocast.data"  # the converted weights, beside the copies of the source's files


def convert(
    src: Path, work: Path, precision_cfg: PrecisionConfig, calib_inputs: dict[str, np.ndarray]
) -> Any:
    """The cast graph of `src`, its weights in `work`: copies of src's data files and the
    converted weights' file."""
    import onnx
    from modelopt.onnx.autocast import convert as mo_convert
    from modelopt.onnx.autocast import utils
    from modelopt.onnx.autocast.graphsanitizer import GraphSanitizer

    low = precision_cfg.low_precision_type
    keep_io = bool(precision_cfg.keep_io_types)
    model = onnx.load(str(src), load_external_data=False)
    io_metadata = mo_convert._capture_network_io_metadata(model, keep_io)
    sanitizer = GraphSanitizer(
        model,
        22 if low == "bf16" else 13,
        trt_plugins=[],
        trt_plugins_precision=[],
        max_ir_version=mo_convert.LATEST_IR_VERSION_SUPPORTED_BY_ORT,
        onnx_path=str(src),
    )
    sanitizer.sanitize()
    model = mo_convert.onnx_utils.infer_types(sanitizer.model, False, strict_mode=True)
    value_info_map, initializer_map, node_to_init_map = utils.setup_mappings(model)
    classifier = _classifier(model, node_to_init_map, initializer_map, precision_cfg, sanitizer)
    converter = _converter_class()(
        work / CAST_DATA,
        model,
        value_info_map,
        initializer_map,
        node_to_init_map,
        keep_io_types=keep_io,
        low_precision_type=low,
        init_conversion_max_bytes=None,
        custom_ops=sanitizer.custom_ops,
        use_standalone_type_inference=False,
        original_network_io_metadata=io_metadata,
        sanitize_model=False,
    )
    reference = reference_stats(model, src.parent, calib_inputs)
    copy_data_files(model, src.parent, work)
    with working_directory(work), reads_apart(), linear_cleanup():
        low_nodes, high_nodes = classifier.run(reference)
        return converter.convert(high_nodes, low_nodes)


def _classifier(
    model: ModelProto,
    node_to_init_map: Any,
    initializer_map: Any,
    precision_cfg: PrecisionConfig,
    sanitizer: Any,
) -> Any:
    from modelopt.onnx.autocast.nodeclassifier import NodeClassifier

    return NodeClassifier(
        model,
        node_to_init_map,
        initializer_map,
        nodes_to_exclude=list(precision_cfg.keep_fp32_nodes),
        op_types_to_exclude=list(precision_cfg.keep_fp32_op_types),
        nodes_to_include=[],
        op_types_to_include=[],
        data_max=float(precision_cfg.data_max),
        init_max=float(precision_cfg.init_max),
        custom_rule=None,
        max_depth_of_reduction=None,
        custom_ops_low_precision_nodes=sanitizer.custom_ops_low_precision_nodes or [],
    )


def reference_stats(
    model: ModelProto, base: Path, feeds: dict[str, np.ndarray]
) -> dict[str, TensorStats]:
    """TensorStats of the graph inputs and of every tensor a node makes, for one batch of
    feeds, from one session reading the weights from `base` (what ModelOpt's reference
    runner gives its classifier, without holding every tensor's values past their
    statistics)."""
    from modelopt.onnx.autocast.referencerunner import TensorStats

    from pipeline.graph import onnx_runtime

    made = (o for n in model.graph.node for o in n.output if o)
    wanted = list(dict.fromkeys([*(o.name for o in model.graph.output), *made]))
    session = onnx_runtime.session_with_outputs(model, base, wanted)
    with console.bar(total=1, desc="AutoCast ranges (streamed)", unit="batch") as bar:
        outs = onnx_runtime.run_named(session, wanted, feeds, "on the fp32 graph")
        bar.update(1)
    stats: dict[str, TensorStats] = {}
    for name, x in [*feeds.items(), *zip(wanted, outs)]:
        a = np.asarray(x)
        if a.dtype.kind not in "biuf":
            continue
        if a.size == 0:
            stats[name] = TensorStats(0.0, 0.0, 0.0, a.shape)
            continue
        stats[name] = TensorStats(float(np.abs(a).max()), a.min(), a.max(), a.shape)
    return stats


def _converter_class() -> type:
    from modelopt.onnx.autocast.precisionconverter import PrecisionConverter

    class StreamedConverter(PrecisionConverter):  # type: ignore[misc]  # modelopt is untyped
        """ModelOpt's converter, each converted weight moved to `data` as it is made."""

        def __init__(self, data: Path, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._data = data

        def _convert_initializer_data(self, init: Any, from_type: Any, to_type: Any) -> Any:
            new = super()._convert_initializer_data(init, from_type, to_type)
            return move_to_file(new, self._data)

    return StreamedConverter


def move_to_file(tensor: Any, data: Path) -> Any:
    """The tensor with its bytes appended to `data` and named there (external data)."""
    from pipeline.graph.external_data import held_bytes, point_at

    raw = held_bytes(tensor)
    with open(data, "ab") as f:
        offset = f.tell()
        f.write(raw)
    point_at(tensor, data.name, offset, len(raw))
    return tensor


def copy_data_files(model: ModelProto, base: Path, work: Path) -> None:
    """Copies in `work` of the data files `model` names in `base`, under the names it gives
    them: ONNX refuses data reached through a symlink or a file with more than one hard
    link. Disk, not memory: the file system streams them."""
    import shutil

    from pipeline.graph import onnx_model

    for f in onnx_model.external_data_files(model, base):
        to = work / f.relative_to(base)
        if to.name == CAST_DATA:
            raise PipelineError(f"the model names a data file {CAST_DATA!r}, which AutoCast uses")
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, to)


@contextlib.contextmanager
def reads_apart() -> Iterator[None]:
    """ModelOpt's numpy_helper.to_array(init) calls read a copy of each tensor kept in
    external data (external_data.read_apart): to_array itself loads the bytes into the tensor it
    is given, the model's own, so every weight the classifier's range rule reads would stay
    in memory. Set for the classifier and converter only, and put back."""
    from onnx import numpy_helper

    from pipeline.graph import external_data

    original = numpy_helper.to_array

    def to_array(tensor: Any, base_dir: str = "") -> np.ndarray:
        return external_data.read_apart(tensor, Path(base_dir or Path.cwd()), original)

    numpy_helper.to_array = to_array
    try:
        yield
    finally:
        numpy_helper.to_array = original


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """ModelOpt reads external weights relative to the working directory (see above)."""
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)
