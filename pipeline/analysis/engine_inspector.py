"""Per-layer engine details from TensorRT's EngineInspector: needs a GPU that can
load the engine (deserialize it), so this is the one part of inspect that cannot run
on a CPU-only machine. `inspect` never raises for a missing or unfit GPU: it says why
the part is absent, and the report prints that."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.analysis import engine_layers
from pipeline.core.errors import PipelineError
from pipeline.engine import backend
from pipeline.records import fingerprint_file
from pipeline.records.fingerprint_file import FingerprintRecord
from pipeline.records.inspect_file import EngineLayer, InspectorSummary, IoTensor


class EngineInspection(InspectorSummary, total=False):
    """What the EngineInspector made of the engine, or why it did not run."""

    layers: list[EngineLayer]
    io_tensors: list[IoTensor]


# TensorRT-RTX runs engines on these compute capabilities only (Hopper, 9.0, is refused).
# Open shape: TensorRT's own JSON, in its version's layout (from_inspector_json reads it).
def engine_information(engine_path: Path, flavour: str) -> dict[str, Any]:
    """Deserialize the engine and return EngineInspector JSON, parsed. GPU only."""
    from pipeline.engine.interrupt import tensorrt_scope
    from pipeline.engine.trt_hooks import make_logger

    trt = backend.import_flavour(flavour)
    # The logger is called back while the engine loads: see pipeline/engine/interrupt.py.
    with tensorrt_scope():
        _runtime, engine = backend.deserialize(trt, make_logger(trt), engine_path)
        inspector = engine.create_engine_inspector()
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        del inspector, engine, _runtime  # freed while deferred: TensorRT may log as it frees
    try:
        doc: dict[str, Any] = json.loads(text)  # an object; from_inspector_json checks its keys
    except json.JSONDecodeError as e:
        raise PipelineError(f"engine inspector output is not JSON ({e})") from None
    return doc


def inspect(engine_path: Path, fingerprint: FingerprintRecord) -> EngineInspection:
    """{available: True, layout, layers, io_tensors} or {available: False, reason}."""
    why = backend.why_engine_cannot_run(fingerprint)
    if why:
        return {"available": False, "reason": why}
    try:
        doc = engine_information(engine_path, fingerprint_file.trt_flavour(fingerprint))
    except PipelineError as e:
        return {"available": False, "reason": str(e)}
    return {"available": True, **engine_layers.from_inspector_json(doc)}
