"""The one place that imports TensorRT. Both flavours share the builder API;
what differs (network flags, hardware compatibility, compute-capability targets)
is decided here from what the imported module actually has."""

from __future__ import annotations

import importlib
from types import ModuleType

from pipeline.errors import PipelineError


def import_flavour(flavour: str) -> ModuleType:
    try:
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


def dtype_name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1].lower()
