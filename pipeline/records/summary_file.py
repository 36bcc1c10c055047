"""metrics/summary.json, the one DVC metrics file (made by pipeline/report/benchmark/headline.py):
flat and numeric only, since DVC shows every leaf as a column. Written by the benchmark
stage; read back by the sweep summary from `dvc exp show --json`, through the check here,
so an experiment made by another version is a row that says so, not a KeyError."""

# No `from __future__ import annotations`: the TypedDict's fields are evaluated at class
# creation, as the reader's field check needs (see core/json_record.py).
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict, cast

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.core.json_record import JsonRecord

NAME = "summary.json"


class Always(TypedDict):
    """The columns every summary has; the others are named by backend and output
    ("tensorrt_median_ms", "worst_cosine"), so the record itself is a flat str -> number."""

    engine_mib: float
    accuracy_gate_pass: int  # 1 or 0: DVC compares numbers, not booleans
    build_gates_pass: int


Summary = dict[str, float | int]
RECORD = JsonRecord("metrics summary", "the benchmark stage", Always)


def _not_numbers(summary: Mapping[str, Any]) -> list[str]:
    return [
        k
        for k, v in summary.items()
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
    ]


def write(folder: Path, summary: Mapping[str, Any]) -> Path:
    if bad := _not_numbers(summary):
        raise ValueError(f"metrics summary has fields that are not finite numbers: {bad}")
    return RECORD.write(folder / NAME, cast(Always, summary))


def check(summary: Any, where: str | Path) -> Summary:
    data = cast(Summary, RECORD.check(summary, where))
    if bad := _not_numbers(data):
        raise PipelineError(
            f"{where} has '{bad[0]}' that is not a number (made by another version, or "
            f"edited); rerun {RECORD.rerun}"
        )
    return data


def read(folder: Path) -> Summary:
    return check(fileio.read_json(folder / NAME, RECORD.what), folder / NAME)
