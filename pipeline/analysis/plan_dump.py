"""TensorRT's engine plan as its builder logs it: the verbose engine-layer lines
(`Layer(...): name, Tactic: ...`) and the one-line layer dump of ProfilingVerbosity.DETAILED
(the EngineInspector's ONELINE format), each engine layer with its tactic, inputs and outputs,
and the engine's I/O tensors. The build-log summary (buildlog.py) reads them from here."""

from __future__ import annotations

import re
from typing import Any, TypedDict

from pipeline.analysis import engine_layers
from pipeline.records.inspect_file import EngineLayer, IoTensor, LayerTensor

ENGINE_LAYER = re.compile(r"^Layer\(([^)]*)\): (.+?), Tactic: (0x[0-9a-fA-F]+|-?\d+), (.*)$")
_IO_TENSOR = re.compile(r"\s*(.+?) \((\w+)\[([-\d,]*)\]\)(?:,|$)")
# ProfilingVerbosity.DETAILED one-line dump (the EngineInspector's ONELINE format).
_PLAN_LAYER = re.compile(
    r"^Name: (?P<name>.*?), LayerType: (?P<type>[^,]*), Inputs: \[(?P<inputs>.*?)\], "
    r"(?:Constants: \[.*?\], )?Outputs: \[(?P<outputs>.*?)\], TacticName: (?P<tactic>.*?), "
    r"(?:StreamId: \S+, )?Metadata: ?(?P<meta>.*)$"
)
_PLAN_TENSOR = re.compile(
    r"\{ Name: (.*?), Dimensions: \[([^\]]*)\],.*?Datatype: (\w+), Format: ([^}]*?) \}"
)
_PLAN_IO = re.compile(r"^\s*Name: (.*?), IOMode: (\w+), DataType: (\w+), Dimensions: \[([^\]]*)\]")


def _dims(text: str) -> list[int]:
    return [int(d) for d in text.split(",") if d.strip()]


def _io_side(text: str) -> list[LayerTensor]:
    return [
        {
            "name": m.group(1).strip(),
            "dtype": engine_layers.dtype(m.group(2)),
            "shape": _dims(m.group(3)),
            "format": "",
        }
        for m in _IO_TENSOR.finditer(text)
    ]


def engine_layer(m: re.Match[str]) -> EngineLayer:
    ins, _, outs = m.group(4).partition(" -> ")
    inputs, outputs = _io_side(ins), _io_side(outs)
    matrix = engine_layers.is_matrix_kernel(m.group(1), m.group(2))
    return {
        "name": m.group(2),
        "type": m.group(1),
        "precision": engine_layers.layer_precision(inputs, outputs, matrix),
        "inputs": inputs,
        "outputs": outputs,
        "onnx_nodes": [],
        "tactic": m.group(3),
    }


def _plan_tensors(text: str) -> list[dict[str, Any]]:
    return [
        {"Name": n, "Dimensions": _dims(d), "Datatype": dt, "Format": f}
        for n, d, dt, f in _PLAN_TENSOR.findall(text)
    ]


class PlanDump(TypedDict):
    """The engine's layers and I/O tensors as the DETAILED dump in the build log lists them
    (build_summary.json's `engine_plan`)."""

    source: str  # where they came from, as the report says it
    layers: list[EngineLayer]
    io_tensors: list[IoTensor]


def parse_plan_dump(message: str) -> PlanDump | None:
    """The `Layers:` / `I/O Tensors:` dump in inspector-JSON shape, then normalised."""
    lines = message.split("\n")
    if not lines or lines[0].strip() != "Layers:":
        return None
    raw_layers, io, section = [], [], "layers"
    for line in lines[1:]:
        if line.strip() == "I/O Tensors:":
            section = "io"
        elif section == "layers" and (m := _PLAN_LAYER.match(line)):
            raw_layers.append(
                {
                    "Name": m["name"],
                    "LayerType": m["type"],
                    "Inputs": _plan_tensors(m["inputs"]),
                    "Outputs": _plan_tensors(m["outputs"]),
                    "TacticName": m["tactic"],
                    "Metadata": m["meta"],
                }
            )
        elif section == "io" and (m := _PLAN_IO.match(line)):
            io.append(
                {
                    "Name": m.group(1),
                    "IOMode": m.group(2),
                    "DataType": m.group(3),
                    "Dimensions": _dims(m.group(4)),
                }
            )
    parsed = engine_layers.from_inspector_json({"Layers": raw_layers, "I/O Tensors": io})
    return {
        "source": "build log (ProfilingVerbosity.DETAILED)",
        "layers": parsed["layers"],
        "io_tensors": parsed["io_tensors"],
    }
