"""Resolve optimization profiles from config against the model's real inputs.

Config names symbolic dims (batch, seq) once for all models, and may give explicit
per-input shapes; here they become concrete min/opt/max shapes per input, with every
mismatch reported before TensorRT is even imported."""

from __future__ import annotations

from typing import Any

from pipeline.core.errors import PipelineError
from pipeline.export.onnx_model import TensorSpec

POINTS = ("min", "opt", "max")


def resolve(profile_cfg: Any, model_inputs: list[TensorSpec]) -> list[dict]:
    """-> [{"name": str, "inputs": {input: {"min": [...], "opt": [...], "max": [...]}}}]"""
    by_name = {t.name: t for t in model_inputs}
    resolved = []
    for spec in profile_cfg.profiles:
        unknown = sorted(set(spec.shapes) - set(by_name))
        if unknown:
            raise PipelineError(
                f"profile '{spec.name}' names input '{unknown[0]}' which the model does not have "
                f"(model inputs: {', '.join(by_name) or 'none'})"
            )
        shapes = {t.name: _resolve_input(spec, t) for t in model_inputs}
        resolved.append({"name": str(spec.name), "inputs": shapes})
    return resolved


def _resolve_input(spec: Any, tensor: TensorSpec) -> dict[str, list[int]]:
    where = f"profile '{spec.name}' input '{tensor.name}'"
    if tensor.name in spec.shapes:
        rng = spec.shapes[tensor.name]
        out = {p: [int(v) for v in rng[p]] for p in POINTS}
        if len(out["min"]) != len(tensor.dims):
            raise PipelineError(
                f"{where} has rank {len(out['min'])} but the model's input has rank {len(tensor.dims)}"
            )
        for axis, dim in enumerate(tensor.dims):
            if isinstance(dim, int) and any(out[p][axis] != dim for p in POINTS):
                raise PipelineError(
                    f"{where} axis {axis} is fixed at {dim} in the model, profile gives "
                    f"{[out[p][axis] for p in POINTS]}"
                )
        return out
    out = {p: [] for p in POINTS}
    for axis, dim in enumerate(tensor.dims):
        if isinstance(dim, int):
            triple = [dim, dim, dim]
        elif isinstance(dim, str) and dim in spec.dims:
            triple = [int(v) for v in spec.dims[dim]]
        else:
            label = f"'{dim}'" if dim else "unnamed"
            raise PipelineError(
                f"{where} axis {axis} ({label}) is dynamic and the profile gives no range for it; "
                f"add profile dims.{dim or '<name>'} or shapes.{tensor.name}"
            )
        for p, v in zip(POINTS, triple):
            out[p].append(v)
    return out


def contains(profile: dict, shapes: dict[str, list[int]]) -> bool:
    for name, shape in shapes.items():
        rng = profile["inputs"].get(name)
        if rng is None or len(shape) != len(rng["min"]):
            return False
        if any(not lo <= s <= hi for s, lo, hi in zip(shape, rng["min"], rng["max"])):
            return False
    return True
