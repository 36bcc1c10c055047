"""What a quantizing family hands the door (transform.py): the calibration summary, the
data it read, and its graphs for the searches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.inputs.calibration_data import CalibrationSet
    from pipeline.precision.common.searchable import Searchable


@dataclass
class QuantizeResult:
    summary: dict[str, Any]
    data: CalibrationSet | None  # None: a method that reads no data (int4 round-to-nearest)
    graphs: Searchable  # one surface the searches use
