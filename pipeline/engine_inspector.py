"""Per-layer engine details from TensorRT's EngineInspector: needs a GPU that can
load the engine (deserialize it), so this is the one part of inspect that cannot run
on a CPU-only machine. `inspect` never raises for a missing or unfit GPU: it says why
the part is absent, and the report prints that."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline import backend, report_layers
from pipeline.errors import PipelineError

# TensorRT-RTX runs engines on these compute capabilities only (Hopper, 9.0, is refused).
RTX_COMPUTE_CAPABILITIES = ("7.5", "8.0", "8.6", "8.9")


def unavailable_reason(fingerprint: dict) -> str | None:
    gpu = fingerprint.get("gpu")
    if not gpu:
        return f"no GPU on this machine ({fingerprint.get('gpu_probe') or fingerprint.get('target')})"
    cc = str(gpu.get("compute_capability", ""))
    runs_rtx = cc in RTX_COMPUTE_CAPABILITIES or cc.startswith("12.")
    if fingerprint.get("trt_flavour") == "tensorrt_rtx" and not runs_rtx:
        return f"TensorRT-RTX does not run engines on {gpu.get('name')} (compute capability {cc})"
    return None


def engine_information(engine_path: Path, flavour: str) -> dict:
    """Deserialize the engine and return EngineInspector JSON, parsed. GPU only."""
    from pipeline.trt_hooks import make_logger

    trt = backend.import_flavour(flavour)
    logger = make_logger(trt)
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(Path(engine_path).read_bytes())
    if engine is None:
        errors = logger.errors()
        raise PipelineError(f"{flavour} cannot load {engine_path}: {errors[-1] if errors else 'no error logged'}")
    inspector = engine.create_engine_inspector()
    text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise PipelineError(f"engine inspector output is not JSON ({e})") from None


def inspect(engine_path: Path, fingerprint: dict) -> dict:
    """{available: True, layout, layers, io_tensors} or {available: False, reason}."""
    why = unavailable_reason(fingerprint)
    if why:
        return {"available": False, "reason": why}
    try:
        doc = engine_information(engine_path, fingerprint["trt_flavour"])
    except PipelineError as e:
        return {"available": False, "reason": str(e)}
    return {"available": True, **report_layers.from_inspector_json(doc)}
