"""Bytes that sample, reference, calibration and benchmark inputs will take, worked out
before any is made, so pipeline.core.memory can refuse a batch of a billion in one line.

From the ONNX input specs where the tool draws the inputs itself (exact: shape times
itemsize, plus the float64/int64 array numpy draws before casting). A model factory's own
sample_inputs is opaque, so it is asked for tiny inputs (every dim 1, then each dim 2
alone) and the bytes of each input are scaled by the dims it grew with."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core import memory
from pipeline.graph.onnx_model import TensorSpec

if TYPE_CHECKING:
    from pipeline.core.config import ModelConfig

DRAW_ITEMSIZE = 8  # numpy's generators draw float64 / int64 before astype()


def shape_of(spec: TensorSpec, dims: Mapping[str, int]) -> list[int] | None:
    """The concrete shape of `spec` at `dims`; None where an axis has no size there."""
    shape: list[int] = []
    for d in spec.dims:
        if isinstance(d, int):
            shape.append(d)
        elif isinstance(d, str) and d in dims:
            shape.append(int(dims[d]))
        else:
            return None
    return shape


def spec_bytes(
    specs: list[TensorSpec], shapes: Mapping[str, Sequence[int]], drawn: bool = False
) -> int:
    """Bytes of arrays of these specs at `shapes` (inputs without a shape count nothing);
    drawn: plus the largest float64/int64 draw that exists while one is cast."""
    sizes = [
        (math.prod(shapes[s.name]), np.dtype(s.dtype).itemsize) for s in specs if s.name in shapes
    ]
    total = sum(n * item for n, item in sizes)
    return total + (max((n * DRAW_ITEMSIZE for n, _ in sizes), default=0) if drawn else 0)


def output_shapes(outputs: list[TensorSpec], dims: Mapping[str, int]) -> dict[str, list[int]]:
    """The outputs whose every axis has a size at the inputs' named `dims`."""
    return {o.name: shape for o in outputs if (shape := shape_of(o, dims)) is not None}


def factory_bytes(module: Any, dims: Mapping[str, int]) -> int | None:  # the user's factory
    """Bytes `module.sample_inputs(dims)` would return, from tiny calls; None where a
    tiny call fails (the real call then says what is wrong)."""
    names = [k for k, v in dims.items() if isinstance(v, int)]
    rng = np.random.default_rng(0)

    def probe(**at: int) -> dict[str, int]:
        out = module.sample_inputs({**{k: 1 for k in names}, **at}, rng)
        return {k: int(np.asarray(v).nbytes) for k, v in out.items()}

    try:
        base = probe()
        grown = {d: probe(**{d: 2}) for d in names}
    except Exception:
        return None
    return sum(
        nbytes * math.prod(int(dims[d]) for d in names if grown[d].get(name, 0) > nbytes)
        for name, nbytes in base.items()
    )


def input_bytes(
    model_cfg: ModelConfig,
    specs: list[TensorSpec],
    shapes: Mapping[str, Sequence[int]],
    drawn: bool = True,
) -> int | None:
    """Bytes of one batch of sample inputs at `shapes` as export.sample_inputs makes them
    (drawn: with the largest draw before its cast)."""
    from pipeline.inputs import factory, samples

    if model_cfg.factory:
        module = factory.resolve(model_cfg.factory)
        if hasattr(module, "sample_inputs"):
            return factory_bytes(module, samples.named_dims(specs, shapes))
    return spec_bytes(specs, shapes, drawn)


def largest_key(
    model_cfg: ModelConfig, specs: list[TensorSpec], shapes: Mapping[str, Sequence[int]]
) -> str:
    """The setting to name for a size: of the largest input, its largest dim given in
    model.sample_dims ("model.sample_dims.batch=10"), else its opt shape from the profile."""
    if not shapes:
        return "profile.shapes"
    name = max(shapes, key=lambda k: math.prod(shapes[k]))
    spec = next(s for s in specs if s.name == name)
    given = {
        str(d): int(size)
        for d, size in zip(spec.dims, shapes[name])
        if isinstance(d, str) and d in model_cfg.sample_dims
    }
    if given:
        dim = max(given, key=lambda k: given[k])
        return f"model.sample_dims.{dim}={given[dim]}"
    return f"profile.shapes.{name} (opt {'x'.join(map(str, shapes[name]))})"


def check_factory_example(model_cfg: ModelConfig, dims: Mapping[str, int]) -> None:
    """The example batch a torch factory traces with fits in memory."""
    from pipeline.inputs import factory

    assert model_cfg.factory, "only a torch factory traces an example"
    module = factory.resolve(model_cfg.factory)
    if not hasattr(module, "sample_inputs"):
        return
    need = factory_bytes(module, dims)
    if need is not None and dims:
        name = max(dims, key=lambda k: int(dims[k]))
        memory.require_memory(
            need, f"model.sample_dims.{name}={dims[name]}", "the export's example"
        )


def check_sample_batches(
    model_cfg: ModelConfig,
    specs: list[TensorSpec],
    outputs: list[TensorSpec],
    shapes: Mapping[str, Sequence[int]],
    count: int,
    what: str,
    count_key: str,
) -> None:
    """`count` batches of sample inputs at `shapes`, with their `outputs`, fit in memory;
    else one line naming the largest input's shapes, or `count_key` when one batch would fit."""
    from pipeline.inputs import samples

    inputs, drawing = (
        input_bytes(model_cfg, specs, shapes, False),
        input_bytes(model_cfg, specs, shapes),
    )
    if inputs is None or drawing is None:
        return
    dims = samples.named_dims(specs, shapes)
    one = inputs + spec_bytes(outputs, output_shapes(outputs, dims))  # every batch's in and out
    draw = drawing - inputs  # made and dropped while one batch is cast
    have = memory.available_memory()
    memory.require_memory(one + draw, largest_key(model_cfg, specs, shapes), what, have)
    memory.require_memory(one * count + draw, count_key, what, have)
