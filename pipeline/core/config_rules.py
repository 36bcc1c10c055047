"""The value rules of the config schema (pipeline/core/config.py): allowed names,
ranges and combinations that types alone cannot express, checked by
config.validate before any work starts."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omegaconf import DictConfig

from pipeline.core.choices import Int4Method, LowPrecision, QuantizeMode, Transform
from pipeline.core.errors import PipelineError

# Transforms that quantize nodes, which precision.fallback=auto may keep in higher precision
# (precision=auto keeps nodes in higher precision by its own search).
QUANTIZING = (Transform.qdq, Transform.int4)
# TensorRT-RTX targets that cannot run int4 weights (Myelin: "HW-specific datatypes: int4").
INT4_UNSUPPORTED_TARGETS = ("SM75",)
# What each transform needs its companion setting to be (the others are unset or ignored).
TRANSFORM_SETTING = {
    Transform.autocast: ("low_precision_type", (LowPrecision.fp16, LowPrecision.bf16)),
    Transform.qdq: ("quantize_mode", (QuantizeMode.int8, QuantizeMode.fp8)),
    Transform.int4: ("quantize_mode", (QuantizeMode.int4,)),
}


def _one_of(value: Any, allowed: tuple[str, ...], key: str, because: str = "") -> None:
    """A choice another setting narrows (the enums in choices.py already hold each field to
    its own choices)."""
    if value not in allowed:
        shown = "null" if value is None else f"'{value}'"
        why = f" with {because}" if because else ""
        raise PipelineError(
            f"invalid config: {key}={shown}{why}; expected one of {', '.join(allowed)}"
        )


def check_values(cfg: DictConfig) -> None:
    """Rules the types alone cannot say; the first broken one is one PipelineError line.
    Group by group, in the order the stages read them."""
    _check_model(cfg.model)
    _check_model_maps(cfg.model)
    _check_precision(cfg.precision)
    _check_build(cfg.build)
    _check_pin(cfg.pin)
    _check_int4_targets(cfg.precision, cfg.build)
    _check_benchmark(cfg.benchmark)
    _check_profile(cfg.profile)


def _check_model(m: DictConfig) -> None:
    if (m.factory is None) == (m.onnx_path is None):
        raise PipelineError(
            "invalid config: model needs exactly one of model.factory, model.onnx_path or "
            "model.folder (model=hf_decoder)"
        )
    if not 7 <= m.opset <= 23:
        raise PipelineError(f"invalid config: model.opset={m.opset}; supported opsets are 7 to 23")
    if m.prompts is not None and m.reference_data is not None:
        raise PipelineError(
            "invalid config: model.prompts and model.reference_data both give the reference "
            "inputs; keep one"
        )
    if m.decode_steps < 0:
        raise PipelineError(f"invalid config: model.decode_steps={m.decode_steps}; 0 or more")


def _check_model_maps(m: DictConfig) -> None:
    """The mappings keyed by an input or dim name."""
    for name, axis in m.sample_axis.items():
        if axis is not None and axis < 0:
            raise PipelineError(
                f"invalid config: model.sample_axis.{name}={axis}; give the axis counting "
                f"samples (0 or more), or null for an input the whole batch shares"
            )
    for name, value in m.constant_inputs.items():
        if value is None:
            raise PipelineError(
                f"invalid config: model.constant_inputs.{name} is null; give the value the "
                f"input is frozen to (a number or a nested list)"
            )
    for name, bounds in m.input_ranges.items():
        if not _is_range(bounds):
            raise PipelineError(
                f"invalid config: model.input_ranges.{name}={list(bounds)}; needs [low, high] "
                f"with low < high"
            )
    for dim, size in m.sample_dims.items():
        if size < 1:
            raise PipelineError(
                f"invalid config: model.sample_dims.{dim}={size}; must be at least 1"
            )


def _is_range(bounds: Any) -> bool:
    numbers = all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
    return len(bounds) == 2 and numbers and bounds[0] < bounds[1]


def _check_precision(p: DictConfig) -> None:
    if not 0.0 <= p.smoothing_alpha <= 1.0:
        raise PipelineError(
            f"invalid config: precision.smoothing_alpha={p.smoothing_alpha}; expected a number "
            f"in [0, 1] (0 leaves the activations alone, 1 moves all of their range into the weights)"
        )
    for key, why in (
        ("holdout", "the share of the reference samples held out for the verdict"),
        ("search_margin", "the share of each threshold's distance to perfect a search keeps"),
    ):
        if not 0.0 <= p[key] <= 0.9:
            raise PipelineError(
                f"invalid config: precision.{key}={p[key]}; expected a number in [0, 0.9] ({why})"
            )
    _check_precision_combinations(p)
    if p.transform in TRANSFORM_SETTING:
        key, allowed = TRANSFORM_SETTING[p.transform]
        because = f"precision.transform={p.transform}"
        _one_of(getattr(p, key), allowed, f"precision.{key}", because)
    if p.transform == Transform.int4:
        _one_of(
            p.int4_method, tuple(Int4Method), "precision.int4_method", "precision.transform=int4"
        )
        if p.block_size < 1:
            raise PipelineError(
                f"invalid config: precision.block_size={p.block_size}; give the int4 block "
                f"length along each weight's reduction axis, e.g. 128 (it must divide that axis)"
            )


def _check_precision_combinations(p: DictConfig) -> None:
    """Settings that apply to some precisions only."""
    if p.smoothing != "none" and p.transform != "qdq":
        raise PipelineError(
            f"invalid config: precision.smoothing={p.smoothing} with precision={p.name}: smoothing "
            f"prepares a graph for int8/fp8 quantization (precision=int8 or fp8)"
        )
    if p.fallback != "none" and p.mode == "weak":
        raise PipelineError(
            f"invalid config: precision.fallback={p.fallback} needs precision.mode=strong (a Q/DQ graph); "
            "weak typing leaves the precision to TensorRT 10's builder flags"
        )
    if p.fallback != "none" and p.transform not in QUANTIZING:
        raise PipelineError(
            f"invalid config: precision.fallback={p.fallback} with precision={p.name}: it has no "
            f"quantized nodes to keep in higher precision (fallback applies to int8, fp8 and int4)"
        )
    if p.transform == "auto" and not p.search_types:
        raise PipelineError(
            "invalid config: precision=auto needs precision.search_types, the types a GEMM may "
            "take besides fp32, e.g. [int4, int8, fp16]"
        )
    if p.transform in ("int4", "auto") and p.mode == "weak":
        raise PipelineError(
            f"invalid config: precision={p.name} needs precision.mode=strong: int4 weights are "
            f"DequantizeLinear nodes in the graph, which TensorRT 10's weak typing does not take"
        )


def _check_pin(p: DictConfig) -> None:
    """The pinned images resolve, and carry one TensorRT (core/ngc.py)."""
    from pipeline.core import ngc

    extra = p.releases_file
    build = ngc.resolve("build", p.build, extra)
    serve = ngc.resolve("serve", p.serve, extra)
    if problem := ngc.pair_problem(build, serve):
        raise PipelineError(f"invalid config: {problem}")
    for name, kind in p.fleet.items():
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", str(name)) or not kind.product:
            raise PipelineError(
                f"invalid config: pin.fleet.{name}: a GPU kind is named in lower case with "
                f"dashes (nvidia-l4) and gives its node label's product (NVIDIA-L4)"
            )


def _check_build(b: DictConfig) -> None:
    if b.workspace_mib <= 0:
        raise PipelineError(
            f"invalid config: build.workspace_mib={b.workspace_mib}; must be positive"
        )
    if not 0 <= b.optimization_level <= 5:
        raise PipelineError(
            f"invalid config: build.optimization_level={b.optimization_level}; expected 0 to 5"
        )


def _check_int4_targets(p: DictConfig, b: DictConfig) -> None:
    """int4 weights run on Ampere and newer: a build for an older target is refused before
    any work (calibration included), not by the builder after it."""
    if p.transform != "int4" and not (p.transform == "auto" and "int4" in p.search_types):
        return
    old = [c for c in b.compute_capabilities if str(c).upper() in INT4_UNSUPPORTED_TARGETS]
    if old:
        raise PipelineError(
            f"invalid config: precision={p.name} with build.compute_capabilities={list(b.compute_capabilities)}: "
            f"{', '.join(old)} cannot run int4 weights (Ampere, SM80, and newer can); drop "
            f"{', '.join(old)} or pick another precision"
        )


def _check_profile(profile: DictConfig) -> None:
    if not profile.profiles:
        raise PipelineError(
            "invalid config: profile.profiles is empty; give at least one optimization profile"
        )
    for name, rng in profile.shapes.items():
        _check_shape_range(rng, f"profile.shapes input '{name}'")
    for spec in profile.profiles:
        for dim, triple in spec.dims.items():
            _check_triple(list(triple), f"profile '{spec.name}' dim '{dim}'")
        for name, rng in spec.shapes.items():
            _check_shape_range(rng, f"profile '{spec.name}' input '{name}'")


def _check_benchmark(bc: DictConfig) -> None:
    if not bc.backends or len(set(bc.backends)) != len(bc.backends):
        raise PipelineError(
            f"invalid config: benchmark.backends={list(bc.backends)}; name each backend once"
        )
    if bc.baseline not in bc.backends:
        raise PipelineError(
            f"invalid config: benchmark.baseline={bc.baseline!r} is not in benchmark.backends"
        )
    for key in ("warmup_s", "min_duration_s", "layer_profile_top"):
        if bc[key] < 0:
            raise PipelineError(f"invalid config: benchmark.{key}={bc[key]}; must not be negative")
    for key in ("min_iterations", "min_tail_samples", "layer_profile_iterations"):
        if bc[key] < 1:
            raise PipelineError(f"invalid config: benchmark.{key}={bc[key]}; must be at least 1")
    for key in ("batch_sizes", "seq_lens"):
        if any(v < 1 for v in bc[key]):
            raise PipelineError(
                f"invalid config: benchmark.{key}={list(bc[key])}; sizes must be at least 1"
            )


def _check_triple(triple: list[int], where: str) -> None:
    if len(triple) != 3:
        raise PipelineError(f"invalid config: {where} needs [min, opt, max], got {triple}")
    lo, opt, hi = triple
    # One rule with `shapes`: a dim may be 0 (a decoder's prefill runs with an empty past;
    # TensorRT-RTX builds a profile whose min is 0).
    if not 0 <= lo <= opt <= hi:
        raise PipelineError(
            f"invalid config: {where} needs 0 <= min <= opt <= max, got {lo}, {opt}, {hi}"
        )


def _check_shape_range(rng: Any, where: str) -> None:
    lo, opt, hi = list(rng.min), list(rng.opt), list(rng.max)
    if not (len(lo) == len(opt) == len(hi)):
        raise PipelineError(
            f"invalid config: {where} needs min, opt and max of one rank, got {lo}, {opt}, {hi}"
        )
    for axis, (a, b, c) in enumerate(zip(lo, opt, hi)):
        if a < 0 or not a <= b <= c:
            raise PipelineError(
                f"invalid config: {where} axis {axis} needs 0 <= min <= opt <= max, got {a}, {b}, {c}"
            )
