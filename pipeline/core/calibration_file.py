"""calibration.json, the calibrate stage's record of the graph it wrote: how it was made
(transform, calibration, fallback), how it was judged (accuracy, gate) and what the build
needs of it (the graph's sha256 and files, its inputs). Written and read here only; the
reader checks the fields every consumer relies on, so a file of another version or a hand
edit is one line naming the file and the field, not a KeyError in the build. Light: the
build stage reads it on an engine-store hit, which imports no numpy or onnx."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core import fileio
from pipeline.core.errors import PipelineError

# field -> the type every consumer relies on (the build, the engine key, the report)
REQUIRED: dict[str, type | tuple[type, ...]] = {
    "precision": str,
    "transform": str,
    "gate": list,
    "gate_passed": bool,
    "accuracy": dict,
    "onnx_sha256": str,
    "inputs": list,
}


def write(path: Path, summary: dict[str, Any]) -> Path:
    missing = [k for k in REQUIRED if k not in summary]
    if missing:  # a bug of this tool, not the user's input: keep the traceback
        raise ValueError(f"calibration summary lacks {', '.join(missing)}")
    return fileio.write_json(path, summary)


def read(path: Path) -> dict[str, Any]:
    summary = fileio.read_json(path, "calibration summary")
    if not isinstance(summary, dict):
        raise PipelineError(f"{path} is not a calibration summary; rerun the calibrate stage")
    for key, kind in REQUIRED.items():
        if not isinstance(summary.get(key), kind):
            raise PipelineError(
                f"{path} has no valid '{key}' (made by another version, or edited); rerun the "
                f"calibrate stage"
            )
    return summary
