"""The ways a person may write an input's shapes, turned into the one form the schema holds
({min: [...], opt: [...], max: [...]}) before the config is merged onto it.

trtexec and Polygraphy address shapes per input (`--shapes x:1x3x640x640`), which needs no
dim names; real exports name their dims `p2o.DynamicDimension.0`, `?` or `unk__214`, or not
at all. So an input's shapes may be written as any of:

    x: 1x3x640x640                                  # fixed: min = opt = max
    x: [1, 3, 640, 640]                             # the same, as a list
    x: [1x3x320x320, 1x3x640x640, 4x3x1280x1280]    # min, opt, max
    x: {min: 1x3x320x320, opt: [1, 3, 640, 640], max: 4x3x1280x1280}

and the whole mapping as trtexec's --shapes string, `x:1x3x640x640,y:1x16`. A rank-0
input is written `[]` (or an empty string). Dim names given by dotted Hydra keys
(`model.sample_dims.p2o.DynamicDimension.0=640` arrives as nested mappings) are joined
back into the one name the exporter wrote."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.errors import PipelineError

POINTS = ("min", "opt", "max")


def parse_shape(value: Any, where: str) -> list[int]:
    """`1x3x640x640`, `[1, 3, 640, 640]` or `[]` -> [1, 3, 640, 640]."""
    if isinstance(value, str):
        text = value.strip()
        parts = [p.strip() for p in text.split("x")] if text else []
        try:
            dims = [int(p) for p in parts]
        except ValueError:
            raise PipelineError(
                f"invalid config: {where}={value!r} is not a shape; write it as 1x3x640x640 "
                f"or [1, 3, 640, 640]"
            ) from None
    elif isinstance(value, (list, tuple)) and all(_is_int(v) for v in value):
        dims = [int(v) for v in value]
    else:
        raise PipelineError(
            f"invalid config: {where}={value!r} is not a shape; write it as 1x3x640x640 "
            f"or [1, 3, 640, 640]"
        )
    if any(d < 0 for d in dims):
        raise PipelineError(f"invalid config: {where}={value!r} has a negative size")
    return dims


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def shape_range(value: Any, where: str) -> dict[str, list[int]]:
    """One input's shapes in any accepted form -> {min, opt, max}."""
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(POINTS))
        if unknown or set(value) != set(POINTS):
            raise PipelineError(
                f"invalid config: {where} needs exactly min, opt and max, got "
                f"{', '.join(map(str, value)) or 'nothing'}"
            )
        return {p: parse_shape(value[p], f"{where}.{p}") for p in POINTS}
    if isinstance(value, (list, tuple)) and len(value) == 3 and not all(map(_is_int, value)):
        return {p: parse_shape(v, f"{where}[{i}]") for i, (p, v) in enumerate(zip(POINTS, value))}
    fixed = parse_shape(value, where)
    return {p: list(fixed) for p in POINTS}


def shapes_mapping(value: Any, where: str) -> dict[str, dict[str, list[int]]]:
    """A mapping of input -> shapes, or trtexec's `x:1x3x640x640,y:1x16` -> the schema's form."""
    if value is None:
        return {}
    if isinstance(value, str):
        out: dict[str, Any] = {}
        for item in filter(None, (s.strip() for s in value.split(","))):
            name, sep, shape = item.rpartition(":")
            if not sep or not name:
                raise PipelineError(
                    f"invalid config: {where}={value!r}; write trtexec's form "
                    f"input:1x3x640x640[,input2:...] or a mapping"
                )
            out[name] = shape
        value = out
    if not isinstance(value, Mapping):
        raise PipelineError(
            f"invalid config: {where} must map input names to shapes, got {value!r}"
        )
    return {str(k): shape_range(v, f"{where}.{k}") for k, v in value.items()}


def joined_names(value: Any) -> Any:
    """{p2o: {DynamicDimension: {0: 640}}} -> {"p2o.DynamicDimension.0": 640}: a dotted
    override of a dim or input name arrives nested; the exporter's name had the dots. A
    mapping of exactly min/opt/max is a value (an input's shapes), not a name part."""
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    for key, v in value.items():
        if isinstance(v, Mapping) and set(v) != set(POINTS):
            for sub, leaf in joined_names(v).items():
                out[f"{key}.{sub}"] = leaf
        else:
            out[str(key)] = v
    return out
