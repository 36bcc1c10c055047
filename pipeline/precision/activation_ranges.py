"""Activation ranges for Q/DQ scales, streamed: one ONNX Runtime session of the fp32 graph
with the calibrated tensors as extra outputs, run batch by batch, each batch reduced to a
running max |x| before the next runs. The session reads the weights from the model's own
files (onnx_runtime.model_file), so memory is ONNX Runtime's one copy of the weights plus
one batch's calibrated tensors, whatever the number of batches."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core import console


def max_abs(
    model: Any,
    base: Path | None,
    tensors: list[str],
    batches: list[dict[str, np.ndarray]],
    shapes_of: Sequence[str] = (),
) -> tuple[dict[str, float], dict[str, tuple[int, ...]]]:
    """max |x| of each of `tensors` over every batch, as float32 like ONNX Runtime's
    MinMax calibrator (ModelOpt's max calibration), and the shape each of `shapes_of`
    (and `tensors`) has in the first batch."""
    from pipeline.export import onnx_runtime

    wanted = list(dict.fromkeys([*tensors, *shapes_of]))
    session = onnx_runtime.session_with_outputs(model, base, wanted)
    amax = dict.fromkeys(tensors, np.float32(0))
    shapes: dict[str, tuple[int, ...]] = {}
    with console.bar(total=len(batches), desc="calibrating (streamed)", unit="batch") as bar:
        for i, feeds in enumerate(batches):
            names = wanted if i == 0 else tensors
            outs = onnx_runtime.run_named(session, names, feeds, "to calibrate")
            if i == 0:
                shapes = {t: tuple(x.shape) for t, x in zip(names, outs)}
            for t, x in zip(names, outs):
                if t in amax and x.size:
                    amax[t] = max(amax[t], np.float32(np.abs(x).max()))
            del outs
            bar.update(1)
    return {t: float(v) for t, v in amax.items()}, shapes
