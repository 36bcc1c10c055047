"""The one place that imports TensorRT. Both flavours share the builder API;
what differs (network flags, hardware compatibility, compute-capability targets)
is decided here from what the imported module actually has."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline.core.errors import PipelineError
from pipeline.records.fingerprint_file import FingerprintRecord


def import_flavour(flavour: str) -> ModuleType:
    """The TensorRT module. A signal while its native library initialises only sets a flag
    (raised as Interrupted once the import is done): raised inside, it made the import fail
    with "initialization failed" and the stage exit 1 instead of 143."""
    from pipeline.engine import interrupt

    try:
        with interrupt.deferred_signals():
            return importlib.import_module(flavour)
    except ImportError as e:
        raise PipelineError(f"cannot import {flavour}: {e}") from None


def is_rtx(trt: ModuleType) -> bool:
    return trt.__name__.startswith("tensorrt_rtx")


def major_version(trt: ModuleType) -> int:
    return int(trt.__version__.split(".")[0])


def is_strongly_typed_only(trt: ModuleType) -> bool:
    """TensorRT 11 and TensorRT-RTX removed the FP16/INT8 builder flags."""
    return is_rtx(trt) or major_version(trt) >= 11 or not hasattr(trt.BuilderFlag, "INT8")


def network_flags(trt: ModuleType, strongly_typed: bool) -> int:
    flags = 0
    names = trt.NetworkDefinitionCreationFlag.__members__
    if strongly_typed and "STRONGLY_TYPED" in names and not is_rtx(trt):
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    if "EXPLICIT_BATCH" in names and major_version(trt) < 10:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    return flags


def dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1].lower()


# Compute capabilities TensorRT-RTX runs engines on (and every 12.x); building for
# them needs no GPU at all.
RTX_COMPUTE_CAPABILITIES = ("7.5", "8.0", "8.6", "8.9")


def why_engine_cannot_run(fingerprint: FingerprintRecord) -> str | None:
    """None where an engine built for this fingerprint can be loaded and run here,
    else the reason (for the benchmark's skip and the report's absent inspector)."""
    gpu = fingerprint.get("gpu")
    if not gpu:
        probe = fingerprint.get("gpu_probe") or fingerprint.get("target")
        return f"no GPU on this machine ({probe}): a TensorRT engine needs an NVIDIA GPU to run"
    cc = str(gpu.get("compute_capability", ""))
    runs_rtx = cc in RTX_COMPUTE_CAPABILITIES or cc.startswith("12.")
    if fingerprint.get("trt_flavour") == "tensorrt_rtx" and not runs_rtx:
        return f"TensorRT-RTX does not run engines on {gpu.get('name')} (compute capability {cc})"
    return None


def deserialize(trt: ModuleType, logger: Any, engine_path: Path) -> tuple[Any, Any]:
    """(runtime, engine); the runtime must outlive the engine, so both are kept."""
    from pipeline.engine import interrupt

    with interrupt.tensorrt_scope():  # the logger is called back while the engine loads
        runtime = trt.Runtime(logger)
        engine = runtime.deserialize_cuda_engine(Path(engine_path).read_bytes())
    if engine is None:
        errors = logger.errors() if hasattr(logger, "errors") else []
        raise PipelineError(
            f"{trt.__name__} cannot load {engine_path}: "
            f"{errors[-1] if errors else 'built for another GPU or TensorRT version?'}"
        )
    return runtime, engine


def refit_from_onnx(trt: ModuleType, engine: Any, logger: Any, onnx_path: Path) -> None:
    """Put the weights back into a weight-stripped engine (build.strip_weights) from the ONNX
    it was built from: TensorRT's parser refitter reads the file and its external data
    itself. GPU only, like every deserialized engine."""
    refitter = trt.Refitter(engine, logger)
    parser = trt.OnnxParserRefitter(refitter, logger)
    if not parser.refit_from_file(str(onnx_path)):
        errors = [
            " ".join(str(parser.get_error(i).desc()).split()) for i in range(parser.num_errors)
        ]
        raise PipelineError(
            f"cannot refit the weight-stripped engine from {onnx_path}: "
            f"{errors[0] if errors else 'the parser gave no reason'}"
        )
    if not refitter.refit_cuda_engine():
        missing = refitter.get_missing_weights()
        raise PipelineError(
            f"cannot refit the weight-stripped engine from {onnx_path}: TensorRT refused it"
            + (f" ({len(missing)} weights missing, e.g. {missing[0]})" if missing else "")
        )
