"""model.constant_inputs: inputs frozen to a value and folded into the graph at export.

A sample rate that selects an `If` branch, a flag, a fixed sequence length: freezing the
value and folding what depends on it (Polygraphy's constant folding, which flattens an `If`
whose condition became constant) leaves the graph a deployment runs, one TensorRT can build
where it cannot build the control flow. The frozen input is no longer fed; the export's
fp32 reference still comes from the model as given, fed the same value."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core.errors import PipelineError, first_line
from pipeline.export import onnx_model
from pipeline.export.onnx_model import TensorSpec


def values(constants: Mapping[str, Any], specs: list[TensorSpec]) -> dict[str, np.ndarray]:
    """Each configured value as an array of its input's dtype and rank, checked against
    the input's fixed dims."""
    by_name = {s.name: s for s in specs}
    out = {}
    for name, value in constants.items():
        spec = by_name.get(name)
        if spec is None:
            raise PipelineError(
                f"invalid config: model.constant_inputs names '{name}', which is not an input "
                f"of the model (its inputs: {', '.join(by_name)})"
            )
        try:
            a = np.asarray(value, dtype=np.dtype(spec.dtype))
        except (TypeError, ValueError) as e:
            raise PipelineError(
                f"invalid config: model.constant_inputs.{name}={value!r} is not a "
                f"{spec.dtype} value: {first_line(e)}"
            ) from None
        if a.ndim < len(spec.dims) and a.size == 1:
            a = a.reshape((1,) * len(spec.dims))  # a scalar for a [1] or [1, 1] input
        fits = a.ndim == len(spec.dims) and all(
            not isinstance(d, int) or d == n for d, n in zip(spec.dims, a.shape)
        )
        if not fits:
            raise PipelineError(
                f"invalid config: model.constant_inputs.{name} has shape {list(a.shape)}, "
                f"the input is {list(spec.dims)}"
            )
        out[name] = a
    return out


def freeze(path: Path, frozen: dict[str, np.ndarray]) -> list[str]:
    """Rewrite the graph at `path` with `frozen` inputs as constants, folded (Polygraphy);
    what changed, for export.json."""
    import onnx
    from polygraphy.backend.onnx import fold_constants

    model = onnx_model.load(path, check=False)
    graph = model.graph
    kept = [i for i in graph.input if i.name not in frozen]
    del graph.input[:]
    graph.input.extend(kept)
    for name, a in frozen.items():
        graph.initializer.append(onnx.numpy_helper.from_array(a, name))
    try:
        folded = fold_constants(model, num_passes=None, error_ok=False)
    except Exception as e:
        raise PipelineError(
            f"folding the graph with model.constant_inputs "
            f"({', '.join(frozen)}) failed: {first_line(e)}"
        ) from None
    onnx_model.save(folded, path)
    left = [n.op_type for n in folded.graph.node if n.op_type in ("If", "Loop")]
    note = f"; {len(left)} If/Loop node(s) remain" if left else "; no If/Loop node remains"
    return [
        f"froze input(s) {', '.join(f'{k}={v.tolist()}' for k, v in frozen.items())} and folded constants{note}"
    ]
