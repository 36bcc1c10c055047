"""Engine layers in one shape, whatever described them: the EngineInspector JSON of
TensorRT 10 (`Bindings`, `Format/Datatype`) or TensorRT 11 (`I/O Tensors`, `Datatype`
and `Format` apart), or the same ProfilingVerbosity.DETAILED dump that TensorRT-RTX
writes into the verbose build log. Pure functions: no TensorRT, no GPU.

A layer becomes {name, type, precision, inputs, outputs, onnx_nodes, tactic}; a
tensor {name, dtype, shape, format}; dtypes are short names (fp32, fp16, int64...). Their
types are report.json's (pipeline/records/inspect_file.py), where the engine's layers end up."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from pipeline.core.errors import PipelineError
from pipeline.records.inspect_file import EngineLayer, IoTensor, LayerTensor

# Words TensorRT uses for a data type, in network dumps (DataType enum names),
# inspector JSON ("Float", "Half") and format descriptions ("Channel major FP16 format").
_DTYPE_WORDS = {
    "float": "fp32",
    "fp32": "fp32",
    "float32": "fp32",
    "half": "fp16",
    "fp16": "fp16",
    "float16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8": "fp8",
    "e4m3": "fp8",
    "fp4": "fp4",
    "int4": "int4",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
    "double": "fp64",
    "fp64": "fp64",
    "e8m0": "e8m0",
}
# Narrower first: the narrowest compute type among a layer's inputs is the precision it runs at.
COMPUTE_ORDER = ("fp4", "int4", "fp8", "int8", "fp16", "bf16", "fp32", "fp64")
PRECISION_COLOURS = {
    "fp32": "#4e79a7",
    "fp64": "#2c4a6e",
    "fp16": "#59a14f",
    "bf16": "#8cd17d",
    "fp8": "#e15759",
    "int8": "#f28e2b",
    "int4": "#b07aa1",
    "fp4": "#d4a6c8",
    "int32": "#bab0ac",
    "int64": "#9d9590",
    "bool": "#d7cfca",
    "uint8": "#c9b18f",
    "mixed": "#edc948",
    "unknown": "#e5e5e5",
}
# Storage types of quantized data: a kernel that only reads or writes them at its edge
# (quantize, dequantize, reformat) computes in a wider type between.
QUANTIZED = ("fp4", "int4", "fp8", "int8")
# Kernels that multiply matrices, by type or by name: Myelin names a kernel after the ops
# fused into it (`__myl_FcAdd...` is a fully connected layer, `_gemm_mha_v2` attention),
# full TensorRT by its implementation (`CaskGemmConvolution`, `CaskConvolution`).
_MATRIX_KERNEL = re.compile(
    r"gemm|conv|correlation|fully.?connected|matrix.?multiply|^__myl_Fc|_mha", re.I
)
METADATA_SEPARATORS = re.compile("[\x1e\x1f]")
_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]\x1e\x1f]+)\]")


def dtype(text: Any) -> str:
    """Short dtype name from any TensorRT spelling; 'unknown' where none is named."""
    for word in re.split(r"[^0-9A-Za-z]+", str(text or "").lower()):
        if word in _DTYPE_WORDS:
            return _DTYPE_WORDS[word]
    return "unknown"


def narrowest(dtypes: Iterable[str]) -> str | None:
    found = [d for d in dtypes if d in COMPUTE_ORDER]
    return min(found, key=COMPUTE_ORDER.index) if found else None


def is_matrix_kernel(layer_type: str, name: str) -> bool:
    return bool(_MATRIX_KERNEL.search(layer_type or "") or _MATRIX_KERNEL.search(name or ""))


def layer_precision(
    inputs: Sequence[Mapping[str, Any]], outputs: Sequence[Mapping[str, Any]], matrix: bool = True
) -> str:
    """What the layer computes in. A matrix kernel (GEMM, convolution): its narrowest
    floating/quantized input, else output. Any other kernel that touches quantized data
    converts at its edge and computes in the widest float type it sees (an int8 → fp32
    dequantize-and-add is fp32 arithmetic). Shape and index layers (int64, bool only)
    keep their integer type."""
    seen: list[str] = [t["dtype"] for t in [*inputs, *outputs]]
    wide = [d for d in seen if d in COMPUTE_ORDER and d not in QUANTIZED]
    if not matrix and wide and any(d in QUANTIZED for d in seen):
        return max(wide, key=COMPUTE_ORDER.index)
    found = narrowest(t["dtype"] for t in inputs) or narrowest(t["dtype"] for t in outputs)
    if found:
        return found
    others = [t["dtype"] for t in [*inputs, *outputs] if t["dtype"] != "unknown"]
    return others[0] if others else "unknown"


def onnx_nodes(metadata: Any) -> list[str]:
    return _ONNX_LAYER.findall(str(metadata or ""))


class EngineLayers(TypedDict):
    """EngineInspector's JSON, parsed (from_inspector_json)."""

    layout: str  # which TensorRT's layout it came in, and whether only names
    layers: list[EngineLayer]
    io_tensors: list[IoTensor]


def _tensor(raw: dict[str, Any]) -> LayerTensor:
    # TensorRT 10 joins format and type in one string; TensorRT 11 splits them.
    fmt = raw.get("Format/Datatype")
    dt = raw.get("Datatype", raw.get("DataType"))
    return {
        "name": str(raw.get("Name", "")),
        "dtype": dtype(dt if dt is not None else fmt),
        "shape": list(raw.get("Dimensions") or []),
        "format": str(fmt if fmt is not None else raw.get("Format", "")),
    }


def normalize_layer(raw: Any) -> EngineLayer:
    if isinstance(raw, str):  # ProfilingVerbosity.LAYER_NAMES_ONLY gives bare names
        return {
            "name": raw,
            "type": "",
            "precision": "unknown",
            "inputs": [],
            "outputs": [],
            "onnx_nodes": [],
            "tactic": None,
        }
    if not isinstance(raw, dict) or "Name" not in raw:
        raise PipelineError(f"engine layer description is not an inspector layer: {str(raw)[:80]}")
    inputs = [_tensor(t) for t in raw.get("Inputs") or []]
    outputs = [_tensor(t) for t in raw.get("Outputs") or []]
    tactic = raw.get("TacticName") or raw.get("TacticValue") or raw.get("Tactic")
    name = METADATA_SEPARATORS.sub("+", str(raw["Name"]))
    kind = str(raw.get("LayerType") or raw.get("ParameterType") or "")
    return {
        "name": name,
        "type": kind,
        "precision": layer_precision(inputs, outputs, is_matrix_kernel(kind, name)),
        "inputs": inputs,
        "outputs": outputs,
        "onnx_nodes": onnx_nodes(raw.get("Metadata")),
        "tactic": str(tactic) if tactic else None,
    }


def _io_tensor(raw: Any) -> IoTensor:
    if isinstance(raw, str):  # TensorRT 10 `Bindings`: names only
        return {"name": raw, "mode": None, "dtype": "unknown", "shape": []}
    return {
        "name": str(raw.get("Name", "")),
        "mode": raw.get("IOMode"),
        "dtype": dtype(raw.get("DataType", raw.get("Datatype"))),
        "shape": list(raw.get("Dimensions") or []),
    }


def from_inspector_json(doc: Any) -> EngineLayers:
    """EngineInspector.get_engine_information(JSON), parsed, in either layout."""
    if not isinstance(doc, dict) or not isinstance(doc.get("Layers"), list):
        raise PipelineError(
            "engine inspector output has no 'Layers' list; is it get_engine_information JSON?"
        )
    if "I/O Tensors" in doc:
        layout, io = "TensorRT 11 (I/O Tensors)", doc["I/O Tensors"]
    else:
        layout, io = "TensorRT 10 (Bindings)", doc.get("Bindings", [])
    layers = [normalize_layer(raw) for raw in doc["Layers"]]
    if layers and not any(l["type"] for l in layers):
        layout += ", layer names only: build with ProfilingVerbosity.DETAILED for details"
    return {"layout": layout, "layers": layers, "io_tensors": [_io_tensor(t) for t in io]}


def histogram(layers: Iterable[Mapping[str, Any]], key: str = "precision") -> dict[str, int]:
    counts = Counter(l[key] for l in layers)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def network_precision(layer: dict[str, Any]) -> str:
    """A parsed-network layer (network.json) only lists its outputs."""
    outs = [{"dtype": dtype(o["dtype"])} for o in layer.get("outputs", [])]
    return layer_precision([], outs)
