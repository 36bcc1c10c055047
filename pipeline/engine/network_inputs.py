"""One network input's range in an optimization profile, with TensorRT's refusals
turned into one line that names the profile and the input.

A shape tensor (an int32/int64 input of rank 0 or 1 whose values TensorRT reads as
shapes, e.g. Reshape's shape or Expand's) needs a range of its values, not of its
shape. Profiles here give shapes only, and handing TensorRT the shape as if it were
the values raised `RuntimeError: min input provided for shape tensor is inconsistent
with other inputs` out of the build (and out of a sweep's job); such inputs are
refused before TensorRT sees them."""

from __future__ import annotations

from typing import Any

from pipeline.core.errors import PipelineError, first_line
from pipeline.engine import backend


def set_range(profile: Any, profile_name: str, tensor: Any, rng: dict[str, list[int]]) -> None:
    where = f"profile '{profile_name}' input '{tensor.name}'"
    if tensor.is_shape_tensor:
        raise PipelineError(
            f"{where} is a shape tensor ({backend.dtype_name(tensor.dtype)}{list(tensor.shape)}: "
            "its values set other tensors' shapes, e.g. Reshape's or Expand's shape input), and "
            "optimization profiles here give input shapes, not value ranges; fix its values in "
            "the model (a constant or an initializer, e.g. polygraphy surgeon sanitize "
            "--fold-constants after fixing them) or compute them inside the graph from a data input"
        )
    try:
        profile.set_shape(tensor.name, rng["min"], rng["opt"], rng["max"])
    except (RuntimeError, ValueError, TypeError) as e:  # TensorRT's own check of the range
        raise PipelineError(f"TensorRT rejects {where} {rng}: {first_line(e)}") from None
