"""Resolve optimization profiles from config against the model's real inputs.

Config gives each input's shapes (profile.shapes, as trtexec's --shapes does, whatever the
dims are called) or names symbolic dims (batch, seq) once for all models; here they become
concrete min/opt/max shapes per input, with every mismatch reported before TensorRT is
even imported."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PipelineError
from pipeline.core.shape_forms import POINTS
from pipeline.graph.onnx_model import ANONYMOUS_DIMS, Dim, TensorSpec
from pipeline.inputs import decoder_profiles

if TYPE_CHECKING:
    from pipeline.core.config import ProfileConfig, ShapeRange

# A resolved optimization profile, as resolve() makes it and the build manifest records it:
# {"name": str, "inputs": {input: {"min": [...], "opt": [...], "max": [...]}}}.
Profile = dict[str, Any]


def resolve(profile_cfg: ProfileConfig, model_inputs: list[TensorSpec]) -> list[Profile]:
    """-> [{"name": str, "inputs": {input: {"min": [...], "opt": [...], "max": [...]}}}]

    An input's shapes come from the profile's own `shapes`, else the group's
    `profile.shapes`, else its dims: fixed sizes, and named dims from the profile's `dims`.
    Every input a profile cannot size is named in one error, with an override to paste."""
    by_name = {t.name: t for t in model_inputs}
    group = dict(getattr(profile_cfg, "shapes", None) or {})
    _known_inputs(group, by_name, "profile.shapes")
    decoder = getattr(profile_cfg, "decoder", None)
    if decoder is not None and int(decoder.max_seq_len) > 0:
        derived = decoder_profiles.profiles(decoder, model_inputs)
        for p in derived:  # explicit shapes still win
            p["inputs"].update({n: _given(p["name"], by_name[n], r) for n, r in group.items()})
        return derived
    resolved: list[Profile] = []
    for spec in profile_cfg.profiles:
        _known_inputs(spec.shapes, by_name, f"profile '{spec.name}'")
        given = {
            t.name: _given(
                spec.name, t, spec.shapes[t.name] if t.name in spec.shapes else group[t.name]
            )
            for t in model_inputs
            if t.name in spec.shapes or t.name in group
        }
        dims = {**{str(k): list(v) for k, v in spec.dims.items()}, **_dims_of(given, by_name)}
        shapes: dict[str, dict[str, list[int]]] = {}
        missing: list[TensorSpec] = []
        for t in model_inputs:
            got = given.get(t.name) or _from_dims(dims, t)
            if got is None:
                missing.append(t)
            else:
                shapes[t.name] = got
        if missing:
            raise PipelineError(_missing_line(spec.name, dims, missing))
        resolved.append({"name": str(spec.name), "inputs": shapes})
    return resolved


def _dims_of(
    given: dict[str, dict[str, list[int]]], by_name: dict[str, TensorSpec]
) -> dict[str, list[int]]:
    """Named dims' [min, opt, max] as the given shapes set them, so an input sharing a dim
    name (recurrent state sharing `batch`) follows; exporters' anonymous names do not."""
    out: dict[str, list[int]] = {}
    for name, rng in given.items():
        for axis, dim in enumerate(by_name[name].dims):
            if isinstance(dim, str) and dim not in ANONYMOUS_DIMS:
                out.setdefault(dim, [rng[p][axis] for p in POINTS])
    return out


def _known_inputs(shapes: Iterable[str], by_name: dict[str, TensorSpec], where: str) -> None:
    unknown = sorted(set(shapes) - set(by_name))
    if unknown:
        raise PipelineError(
            f"{where} names input '{unknown[0]}' which the model does not have "
            f"(model inputs: {', '.join(by_name) or 'none'})"
        )


def _given(profile: str, tensor: TensorSpec, rng: ShapeRange) -> dict[str, list[int]]:
    where = f"profile '{profile}' input '{tensor.name}'"
    out = {p: [int(v) for v in s] for p, s in zip(POINTS, (rng.min, rng.opt, rng.max))}
    if len(out["min"]) != len(tensor.dims):
        raise PipelineError(
            f"{where} has rank {len(out['min'])} but the model's input has rank "
            f"{len(tensor.dims)} {describe_dims(tensor.dims)}"
        )
    for axis, dim in enumerate(tensor.dims):
        if isinstance(dim, int) and any(out[p][axis] != dim for p in POINTS):
            raise PipelineError(
                f"{where} axis {axis} is fixed at {dim} in the model, profile gives "
                f"{[out[p][axis] for p in POINTS]}"
            )
    return out


def _from_dims(dims: dict[str, list[int]], tensor: TensorSpec) -> dict[str, list[int]] | None:
    """Fixed sizes and named dims; None where an axis has neither."""
    out: dict[str, list[int]] = {p: [] for p in POINTS}
    for dim in tensor.dims:
        if isinstance(dim, int):
            triple = [dim, dim, dim]
        elif isinstance(dim, str) and dim in dims:
            triple = [int(v) for v in dims[dim]]
        else:
            return None
        for p, v in zip(POINTS, triple):
            out[p].append(v)
    return out


def describe_dims(dims: Sequence[Dim]) -> str:
    """[?, 3, height, width]: unnamed dynamic axes as `?`."""
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


# Placeholders for a dynamic axis in the override an error suggests: a batch axis from
# 1 to 8; any other from 32 to 1024. Examples only: the line says to put real sizes.
EXAMPLE_BATCH, EXAMPLE_OTHER = (1, 1, 8), (32, 256, 1024)


def _missing_line(profile: str, dims: dict[str, list[int]], missing: list[TensorSpec]) -> str:
    inputs = ", ".join(
        f"'{t.name}' {describe_dims(t.dims)} (no range for {', '.join(_unsized(dims, t))})"
        for t in missing
    )
    example = ", ".join(f"{t.name}: {_example(dims, t)}" for t in missing)
    return (
        f"profile '{profile}' has no shapes for {len(missing)} dynamic input(s): {inputs}; "
        f"say each one's min, opt and max once, e.g. -S 'profile.shapes={{{example}}}' "
        f"(the sizes of those axes are placeholders: put the ones you deploy at)"
    )


def _unsized(dims: dict[str, list[int]], tensor: TensorSpec) -> list[str]:
    return [
        f"'{dim}'" if isinstance(dim, str) else f"axis {axis}"
        for axis, dim in enumerate(tensor.dims)
        if not isinstance(dim, int) and not (isinstance(dim, str) and dim in dims)
    ]


def _example(dims: dict[str, list[int]], tensor: TensorSpec) -> str:
    """[min, opt, max] as Hydra reads it back: 1x3x32x32 per point, [[n]] for rank 1 (a
    bare [1, 1, 8] would be one fixed shape of rank 3)."""
    points: list[list[int]] = [[], [], []]
    dynamic = [a for a, d in enumerate(tensor.dims) if not isinstance(d, int)]
    for axis, dim in enumerate(tensor.dims):
        if isinstance(dim, int):
            triple: Sequence[int] = (dim, dim, dim)
        elif isinstance(dim, str) and dim in dims:
            triple = dims[dim]
        else:
            triple = EXAMPLE_BATCH if axis == dynamic[0] else EXAMPLE_OTHER
        for point, v in zip(points, triple):
            point.append(int(v))
    if len(tensor.dims) == 1:
        return "[" + ", ".join(f"[{p[0]}]" for p in points) + "]"
    return "[" + ", ".join("x".join(map(str, p)) for p in points) + "]"


def contains(profile: Profile, shapes: dict[str, list[int]]) -> bool:
    for name, shape in shapes.items():
        rng = profile["inputs"].get(name)
        if rng is None or len(shape) != len(rng["min"]):
            return False
        if any(not lo <= s <= hi for s, lo, hi in zip(shape, rng["min"], rng["max"])):
            return False
    return True
