"""Bytes that sample, reference, calibration and benchmark inputs will take, worked out
before any is made, so pipeline.core.memory can refuse a batch of a billion in one line.

From the ONNX input specs where the tool draws the inputs itself (exact: shape times
itemsize, plus the float64/int64 array numpy draws before casting). A model factory's own
sample_inputs is opaque, so it is asked for tiny inputs (every dim 1, then each dim 2
alone) and the bytes of each input are scaled by the dims it grew with."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.core import memory
from pipeline.export.onnx_model import TensorSpec

DRAW_ITEMSIZE = 8  # numpy's generators draw float64 / int64 before astype()


def shape_of(spec: TensorSpec, dims: Mapping[str, int]) -> list[int] | None:
    """The concrete shape of `spec` at `dims`; None where an axis has no size there."""
    shape = []
    for d in spec.dims:
        if isinstance(d, int):
            shape.append(d)
        elif isinstance(d, str) and d in dims:
            shape.append(int(dims[d]))
        else:
            return None
    return shape


def spec_bytes(specs: list[TensorSpec], dims: Mapping[str, int], drawn: bool = False) -> int:
    """Bytes of arrays of these specs at `dims` (axes without a size count nothing);
    drawn: plus the largest float64/int64 draw that exists while one is cast."""
    sizes = [
        (math.prod(shape), np.dtype(s.dtype).itemsize)
        for s in specs
        if (shape := shape_of(s, dims)) is not None
    ]
    total = sum(n * item for n, item in sizes)
    return total + (max((n * DRAW_ITEMSIZE for n, _ in sizes), default=0) if drawn else 0)


def factory_bytes(module: Any, dims: Mapping[str, int]) -> int | None:
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
    model_cfg: Any, specs: list[TensorSpec], dims: Mapping[str, int], drawn: bool = True
) -> int | None:
    """Bytes of one batch of sample inputs at `dims` as export.sample_inputs makes them
    (drawn: with the largest draw before its cast)."""
    from pipeline.export import factory

    if model_cfg.factory:
        module = factory.resolve(model_cfg.factory)
        if hasattr(module, "sample_inputs"):
            return factory_bytes(module, dims)
    return spec_bytes(specs, dims, drawn)


def dims_key(prefix: str, dims: Mapping[str, int]) -> str:
    """The setting to name for a size: the largest of `dims` ("model.sample_dims.batch=10")."""
    if not dims:
        return prefix
    name = max(dims, key=lambda k: int(dims[k]))
    return f"{prefix}.{name}={dims[name]}"


def check_sample_batches(
    model_cfg: Any,
    specs: list[TensorSpec],
    outputs: list[TensorSpec],
    count: int,
    what: str,
    count_key: str,
) -> None:
    """`count` batches of sample inputs at model.sample_dims, with their `outputs`, fit in
    memory; else one line naming the largest dim, or `count_key` when one batch would fit."""
    dims = dict(model_cfg.sample_dims)
    inputs, drawing = (
        input_bytes(model_cfg, specs, dims, False),
        input_bytes(model_cfg, specs, dims),
    )
    if inputs is None or drawing is None:
        return
    one = inputs + spec_bytes(outputs, dims)  # kept: every batch's inputs and outputs
    draw = drawing - inputs  # made and dropped while one batch is cast
    have = memory.available_memory()
    memory.require_memory(one + draw, dims_key("model.sample_dims", dims), what, have)
    memory.require_memory(one * count + draw, count_key, what, have)
