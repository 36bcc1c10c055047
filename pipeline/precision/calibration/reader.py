"""ONNX Runtime's calibration data reader over calibration batches, with a progress bar:
ModelOpt's int8/fp8 and int4 quantizers both pull batches through it."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.core import console


def reader(batches: list[dict[str, np.ndarray]], progress: console.Bar) -> Any:
    """An onnxruntime CalibrationDataReader over `batches` (Any: onnxruntime is untyped)."""
    from onnxruntime.quantization.calibrate import CalibrationDataReader

    class Reader(CalibrationDataReader):  # type: ignore[misc]  # untyped onnxruntime: base is Any
        def __init__(self) -> None:
            self.i = 0

        def get_next(self) -> dict[str, np.ndarray] | None:
            if self.i >= len(batches):
                return None
            self.i += 1
            progress.update(1)
            return batches[self.i - 1]

        def get_first(self) -> dict[str, np.ndarray]:
            return batches[0]

        def rewind(self) -> None:
            self.i = 0
            progress.reset()

    return Reader()
