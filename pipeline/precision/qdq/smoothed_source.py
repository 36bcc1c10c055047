"""The fp32 source and the tensors SmoothQuant makes of it, as smoothing.apply takes them:
in memory for a graph that holds its weights, in one scratch data file for a graph that
keeps them in external-data files. A model of that size then never has a copy of its
weights in Python: ONNX Runtime's sessions and ModelOpt read them from the file (a 653 MB
decoder smoothed in memory held the source, the smoothed copy and ONNX Runtime's own at
once: 3.9 GB while its scales were calibrated)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.graph.external_data import Gathered
from pipeline.precision.common import streamed
from pipeline.precision.qdq import smoothing
from pipeline.precision.qdq.smoothing import SmoothGroup

if TYPE_CHECKING:
    from onnx import ModelProto


@dataclass
class SmoothedSource:
    source: ModelProto  # the fp32 graph, its external data in `base`
    base: Path
    made: dict[str, Any]  # smoothing.smoothed_tensors(), by name
    scratch: tempfile.TemporaryDirectory[str] | None = None  # holds `base` while this lives


def prepare(source: ModelProto, base: Path, groups: list[SmoothGroup]) -> SmoothedSource:
    """`source` (weights in `base`'s files where it keeps them there) with the tensors its
    groups make. Weights kept in files go, with the smoothed tensors, into one scratch data
    file read one tensor at a time, and the source returned names that file."""
    import onnx

    if not groups or not streamed.external_data(source):
        made = {t.name: t for t in smoothing.smoothed_tensors(source, groups, base)}
        return SmoothedSource(source, base, made)
    # system temp, as ModelOpt's work folder (quantize._cached_scales): TMPDIR moves both
    scratch = tempfile.TemporaryDirectory(prefix="smoothed.")
    path = Path(scratch.name) / "model.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(source)  # the graph only: its weights are in files
    made = {}
    with Gathered(path, base) as gathered:
        for t in smoothing.smoothed_tensors(source, groups, base):
            gathered.add(t)  # its bytes to the file; `t` names them there
            made[t.name] = t
        gathered.finish(copy)
    return SmoothedSource(copy, path.parent, made, scratch)
