"""Activation ranges for Q/DQ scales, streamed: one ONNX Runtime session of the fp32 graph
with the calibrated tensors as extra outputs, run batch by batch, each batch folded into a
running statistic before the next runs. The session reads the weights from the model's own
files (onnx_runtime.model_file), so memory is ONNX Runtime's one copy of the weights plus
one batch's calibrated tensors, whatever the number of batches.

Two statistics, ModelOpt's two methods:
- max: a running max |x|, as ONNX Runtime's MinMax calibrator with symmetric activations.
- entropy: ONNX Runtime's own HistogramCollector (128 bins, widened as a batch reaches
  past them), fed one batch at a time as ModelOpt's patched collect_value feeds it; the
  threshold is the collector's KL-divergence search. Using their collector, not a port
  of it, keeps every bin edge and threshold theirs. The one thing ported is ModelOpt's
  patched collect_value (fold_histogram, checked against theirs in
  tests/precision/test_streamed.py): importing it imports ModelOpt's whole ONNX package
  and torch with it, 266 MB of a process whose bound is the model's bytes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core import console
from pipeline.precision.common.modelopt_log import quiet_modelopt

if TYPE_CHECKING:
    from onnx import ModelProto

Ranges = tuple[dict[str, float], dict[str, tuple[int, ...]]]


def max_abs(
    model: ModelProto,
    base: Path | None,
    tensors: list[str],
    batches: list[dict[str, np.ndarray]],
    shapes_of: Sequence[str] = (),
) -> Ranges:
    """max |x| of each of `tensors` over every batch, as float32 like ONNX Runtime's
    MinMax calibrator (ModelOpt's max calibration), and the shape each of `shapes_of`
    (and `tensors`) has in the first batch."""
    amax = dict.fromkeys(tensors, np.float32(0))

    def fold(outs: dict[str, np.ndarray]) -> None:
        for t, x in outs.items():
            if x.size:
                amax[t] = max(amax[t], np.float32(np.abs(x).max()))

    shapes = _each_batch(model, base, tensors, batches, shapes_of, fold)
    return {t: float(v) for t, v in amax.items()}, shapes


# ModelOpt's EntropyCalibrater settings (ort_patching._create_calibrator_with_extra_options)
ENTROPY_BINS = 128


def entropy(
    model: ModelProto,
    base: Path | None,
    tensors: list[str],
    batches: list[dict[str, np.ndarray]],
    shapes_of: Sequence[str] = (),
) -> Ranges:
    """The |threshold| ModelOpt's entropy calibration gives each of `tensors` (the larger
    end of the range ONNX Runtime's KL search picks; activations are symmetric), and the
    first batch's shapes as max_abs gives them."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    collector = HistogramCollector(
        method="entropy",
        symmetric=False,
        num_bins=ENTROPY_BINS,
        num_quantized_bins=ENTROPY_BINS,
        percentile=99.999,
        scenario="same",
    )

    def fold(outs: dict[str, np.ndarray]) -> None:
        for t, x in outs.items():
            fold_histogram(collector, t, x)

    shapes = _each_batch(model, base, tensors, batches, shapes_of, fold)
    with quiet_modelopt():  # ONNX Runtime prints its progress
        found = collector.compute_collection_result()
    return {t: float(max(abs(lo), abs(hi))) for t, (lo, hi, *_) in found.items()}, shapes


def fold_histogram(collector: Any, tensor: str, x: np.ndarray) -> None:  # ORT ships no types
    """ModelOpt's collect_value (ort_patching._collect_value) for one batch's `x`: inf and
    nan ends made finite, and a first histogram's range taken in float64 (a float16 one
    can underflow numpy's bin edges); later batches merged by the collector's own code."""
    data = np.asarray(x).flatten()
    if data.size:
        lo, hi = np.min(data), np.max(data)
    else:
        lo = hi = np.array(0, dtype=data.dtype)
    lo = np.finfo(np.float32).tiny if np.isinf(lo) or np.isnan(lo) else lo
    hi = np.finfo(np.float32).max if np.isinf(hi) or np.isnan(hi) else hi
    threshold = max(abs(lo), abs(hi))
    held = collector.histogram_dict
    if tensor in held:
        held[tensor] = collector.merge_histogram(held[tensor], data, lo, hi, threshold)
    else:
        edge = float(threshold)
        hist, edges = np.histogram(data, collector.num_bins, range=(-edge, edge))
        held[tensor] = (hist, edges, lo, hi, threshold)


def _each_batch(
    model: ModelProto,
    base: Path | None,
    tensors: list[str],
    batches: list[dict[str, np.ndarray]],
    shapes_of: Sequence[str],
    fold: Callable[[dict[str, np.ndarray]], None],
) -> dict[str, tuple[int, ...]]:
    """Run every batch with `tensors` as outputs, folding each batch's into `fold` before
    the next runs; the first batch's shapes of `tensors` and `shapes_of`."""
    from pipeline.graph import onnx_runtime

    wanted = list(dict.fromkeys([*tensors, *shapes_of]))
    session = onnx_runtime.session_with_outputs(model, base, wanted)
    shapes: dict[str, tuple[int, ...]] = {}
    with console.bar(total=len(batches), desc="calibrating (streamed)", unit="batch") as bar:
        for i, feeds in enumerate(batches):
            names = wanted if i == 0 else tensors
            outs = dict(zip(names, onnx_runtime.run_named(session, names, feeds, "to calibrate")))
            if i == 0:
                shapes = {t: tuple(x.shape) for t, x in outs.items()}
            fold({t: outs[t] for t in tensors})
            del outs
            bar.update(1)
    return shapes
