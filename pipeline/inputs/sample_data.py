"""The inputs the tool makes or reads for a model: sample inputs (the factory's sampler, else
drawn by dtype within model.input_ranges) and the reference set the gate and the benchmark
judge by (model.reference_data, the factory's sampler, or random, and said so)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model
from pipeline.inputs import factory, samples

if TYPE_CHECKING:
    from pipeline.core.config import ModelConfig

REFERENCE_SEED_OFFSET = 1_000


def load_factory(name: str) -> ModuleType:
    # A module, or `module:object` (pipeline/inputs/factory.py); typed as the module it
    # usually is.
    module: ModuleType = factory.resolve(name)
    missing = [a for a in ("build", "INPUT_NAMES", "OUTPUT_NAMES") if not hasattr(module, a)]
    if missing:
        raise PipelineError(f"model factory '{name}' lacks {', '.join(missing)}")
    return module


def sample_inputs(
    model_cfg: ModelConfig,
    specs: list[onnx_model.TensorSpec],
    shapes: Mapping[str, Sequence[int]],
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Inputs of the given shapes: the factory's own sampler where there is one
    (realistic masks, token ranges; it takes the named dims' sizes), else by dtype."""
    if model_cfg.factory:
        module = load_factory(model_cfg.factory)
        if hasattr(module, "sample_inputs"):
            # the user's factory (untyped code): its sampler gives arrays by input name
            given: dict[str, np.ndarray] = module.sample_inputs(
                samples.named_dims(specs, shapes), rng
            )
            return given
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        low, high = input_range(model_cfg, spec.name)
        out[spec.name] = random_array(
            spec.dtype,
            list(shapes[spec.name]),
            rng,
            low,
            high,
            model_cfg.int_low,
            model_cfg.int_high,
        )
    return out


def input_range(model_cfg: ModelConfig, name: str) -> tuple[float | None, float | None]:
    """[low, high) for a random input: model.input_ranges, else 0/1 for a mask, else
    int_low/int_high for integers and a standard normal (None, None) for floats."""
    ranges = dict(getattr(model_cfg, "input_ranges", None) or {})
    if name in ranges:
        return tuple(ranges[name])
    if "mask" in name.lower():
        return 0, 2
    return None, None


def check_input_ranges(model_cfg: ModelConfig, specs: list[onnx_model.TensorSpec]) -> None:
    names = [s.name for s in specs]
    for name in getattr(model_cfg, "input_ranges", None) or {}:
        if name not in names:
            raise PipelineError(
                f"invalid config: model.input_ranges names '{name}', which is not an input of the "
                f"model (its inputs: {', '.join(names)})"
            )


def random_array(
    dtype: str,
    shape: list[int],
    rng: np.random.Generator,
    low: float | None,
    high: float | None,
    int_low: int = 0,
    int_high: int = 100,
) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        if low is None or high is None:
            lo, hi = int_low, int_high
        else:
            lo, hi = int(np.ceil(low)), int(np.ceil(high))
        return rng.integers(lo, hi, size=shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if low is None or high is None:
        return rng.standard_normal(shape).astype(dt)
    return rng.uniform(low, high, size=shape).astype(dt)


def reference_inputs(
    model_cfg: ModelConfig, specs: list[onnx_model.TensorSpec], layout: samples.SampleLayout
) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]]:
    """The inputs the gate and the benchmark judge by, and where they came from:
    model.reference_data (the user's arrays, in batches of the layout's size), the
    factory's sampler, or random (at the layout's shapes)."""
    if model_cfg.reference_data:
        from pipeline.inputs.array_folder import data_sha256, read_folder

        if not tracked_by(model_cfg.reference_data, model_cfg.reference_source):
            raise PipelineError(
                f"model.reference_data={model_cfg.reference_data} is not under model.reference_source="
                f"{model_cfg.reference_source}, so DVC would not see it change; leave "
                f"model.reference_source unset or point it at a folder holding the data"
            )
        batches = read_folder(
            model_cfg.reference_data,
            specs,
            "reference data",
            "model.reference_data",
            0,
            layout.batch,
            axes=layout.axes,
            labels=True,
        )
        return batches, {
            "source": "folder",
            "random": False,
            "path": str(model_cfg.reference_data),
            "samples": sum(samples.count(b, layout.axes) for b in batches),
            "sha256": data_sha256(batches),
        }
    rng = np.random.default_rng(int(model_cfg.seed) + REFERENCE_SEED_OFFSET)
    batches = [
        sample_inputs(model_cfg, specs, layout.shapes, rng)
        for _ in range(int(model_cfg.num_reference_batches))
    ]
    if model_cfg.factory and hasattr(load_factory(model_cfg.factory), "sample_inputs"):
        return batches, {
            "source": "factory",
            "random": False,
            "sampler": f"{model_cfg.factory}.sample_inputs",
        }
    return batches, {
        "source": "random",
        "random": True,
        "note": "RANDOM reference inputs (no model.reference_data): the accuracy gate and the benchmark "
        "say little about real inputs; set model.reference_data to a folder of real ones",
        "ranges": {s.name: _drawn_from(model_cfg, s) for s in specs},
    }


def _drawn_from(model_cfg: ModelConfig, spec: onnx_model.TensorSpec) -> list[float | None] | str:
    low, high = input_range(model_cfg, spec.name)
    kind = np.dtype(spec.dtype).kind
    if kind == "b":
        return [0, 2]
    if low is None:
        return (
            [int(model_cfg.int_low), int(model_cfg.int_high)] if kind in "iu" else "standard normal"
        )
    return [low, high]


def no_batches(model_cfg: ModelConfig, reference: dict[str, Any]) -> str:
    need = "the accuracy gate and the benchmark need at least one"
    if reference.get("source") == "folder":
        return (
            f"model.reference_data={model_cfg.reference_data} gives no reference batches "
            f"({reference.get('samples', 0)} samples): {need}; put arrays keyed by input name in it"
        )
    return (
        f"model.num_reference_batches={model_cfg.num_reference_batches} gives no reference "
        f"batches: {need}; set it to 1 or more"
    )


def tracked_by(path: str | Path, dep: str | Path) -> bool:
    """Whether `path` is the DVC dependency `dep` or lies inside it (links resolved)."""
    path, dep = Path(path).resolve(), Path(dep).resolve()
    return path == dep or dep in path.parents
