"""report.json, the inspect stage's record of what TensorRT made of the graph (written by
pipeline/flow/inspect_step.py from pipeline/report/inspect/report.py's data). `trt-pipeline diff`
reads it back, from a folder or from a DVC experiment, through the one checked reader
here; the fields below are those its readers rely on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core.json_record import JsonRecord

NAME = "report.json"
RECORD = JsonRecord(
    "inspect report",
    "the inspect stage",
    {
        "precision": str,
        "engine.bytes": int,
        "engine.backend.flavour": str,
        "engine.backend.version": str,
        "build_log": dict,
        "network.layers": list,
    },
)


def write(folder: Path, report: dict[str, Any]) -> Path:
    return RECORD.write(folder / NAME, report)


def read(folder: Path) -> dict[str, Any]:
    return RECORD.read(folder / NAME)
