"""How much TensorRT fused, measured the same way on every flavour: ONNX compute nodes
(as the ONNX parser imported them) per engine layer (as the engine lists them).

The optimizer's own counts (`Original: N layers` ... `After reformat layers: M layers`)
cannot serve: on TensorRT-RTX, and wherever Myelin takes the whole graph, M is the
number of Myelin regions (1), whatever the engine runs inside them, so N / M grows
with the model, not with fusion. Those counts are kept, as what they are (`optimizer`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from pipeline.analysis.plan_dump import PlanDump
    from pipeline.records.inspect_file import EngineLayer

# Nodes that compute nothing an engine layer could fuse: constants, pass-throughs, and
# the Q/DQ pairs that only say which precision the next kernel reads (counting them would
# make every int8 graph look better fused than its fp32 original).
NON_COMPUTE_OPS = frozenset({"Constant", "Identity", "QuantizeLinear", "DequantizeLinear"})


class FusionMeasure(TypedDict):
    """How far TensorRT fused the graph, and what the ratio counts."""

    layers_original: int | None  # ONNX compute nodes the parser read
    layers_final: int | None  # engine layers
    fusion_ratio: float | None
    fusion_basis: str
    optimizer: dict[str, int | None]  # the optimizer's own layer counts, apart


def measure(
    parsed: dict[str, dict[str, str]],
    plan: PlanDump | None,
    engine_layers: list[EngineLayer],
    regions: set[str],
    passes: list[dict[str, Any]],
) -> FusionMeasure:
    """The summary keys other code reads (layers_original, layers_final, fusion_ratio),
    with their meaning written down (fusion_basis) and the optimizer's counts apart.
    parsed: ONNX node name -> {op, dtype}; plan: the DETAILED engine-layer dump or None;
    engine_layers: `Engine Layer Information` layers; regions: Myelin region names."""
    nodes = sum(1 for v in parsed.values() if v["op"] not in NON_COMPUTE_OPS)
    if plan and plan.get("layers"):
        layers, source = plan["layers"], plan["source"]
    elif engine_layers and not all(l["name"] in regions for l in engine_layers):
        layers, source = engine_layers, "build log (Engine Layer Information)"
    else:  # only Myelin regions, or nothing: their count is not the engine's layers
        layers, source = [], ""
    if not nodes:
        basis = "unknown: the build log names no parsed ONNX nodes (a verbose log is needed)"
    elif not layers:
        basis = (
            "unknown: the build log lists no engine layers, only Myelin regions "
            "(build with ProfilingVerbosity.DETAILED)"
        )
    else:
        inside = sum(1 for l in layers if l["name"] in regions)
        caveat = (
            f"; {inside} of them Myelin regions, each counted as one layer though it runs many kernels"
            if inside and not plan
            else ""
        )
        basis = (
            f"{nodes} ONNX compute nodes (the parser's, without Constant, Identity and Q/DQ) "
            f"per engine layer ({len(layers)}, {source}{caveat})"
        )
    original = next((p["layers"] for p in passes if p["pass"] == "Original"), None)
    return {
        "layers_original": nodes or None,
        "layers_final": len(layers) or None,
        "fusion_ratio": round(nodes / len(layers), 3) if nodes and layers else None,
        "fusion_basis": basis,
        "optimizer": {
            "layers_parsed": original,
            "layers_after": passes[-1]["layers"] if passes else None,
            "regions": len(regions),
        },
    }
