"""A model factory as model.factory (or calibration.factory) names it: a module
(`pipeline.zoo.cnn_classifier`) or an object in one (`mypkg.models:make`), the way
entry points name objects.

The factory provides build(seed) -> torch.nn.Module, INPUT_NAMES and OUTPUT_NAMES
(DYNAMIC_AXES, sample_inputs(dims, rng) and calibration_batches(n, batch_size, seed)
optional): a module, a class or any object with those attributes. A callable named after
the colon that has no `build` is called once, without arguments, and what it returns is
the factory (`def make(): return SimpleNamespace(build=..., INPUT_NAMES=[...], ...)`)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from pipeline.core.errors import PipelineError, first_line


def module_name(name: str) -> str:
    return name.partition(":")[0]


def _import(name: str, what: str) -> Any:
    # A factory in the repository the stage runs in imports as `python -m` would find it,
    # also under the `trt-pipeline` console script (whose sys.path lacks the working
    # directory). Appended: an installed package of the same name still wins.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(module_name(name))
    except ModuleNotFoundError as e:
        raise PipelineError(f"{what} '{name}' not found ({e})") from None


@functools.lru_cache(maxsize=16)
def resolve(name: str, what: str = "model factory") -> Any:
    """The factory object `name` names (made once per process for a `module:callable`)."""
    obj = _import(name, what)
    attr = name.partition(":")[2]
    for part in attr.split(".") if attr else []:
        if not hasattr(obj, part):
            raise PipelineError(
                f"{what} '{name}': module '{module_name(name)}' has no attribute '{attr}'"
            )
        obj = getattr(obj, part)
    if attr and callable(obj) and not hasattr(obj, "build"):
        try:
            obj = obj()
        except Exception as e:
            raise PipelineError(f"{what} '{name}' failed when called: {first_line(e)}") from None
    return obj


def source_file(name: str, what: str = "model factory") -> Path:
    """The file of the module that holds the factory (what dvc.yaml must track)."""
    _import(name, what)
    spec = importlib.util.find_spec(module_name(name))
    if spec is None or not spec.origin:
        raise PipelineError(f"{what} '{name}' not found")
    return Path(spec.origin)


def resolve_callable(name: str, what: str) -> Any:
    """The callable `module:attr` names, not called (a user's metric function)."""
    module, sep, attr = name.partition(":")
    if not sep or not attr:
        raise PipelineError(f"{what}={name}: name a function as module:function")
    obj = _import(module, what)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PipelineError(f"{what}={name}: module '{module}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise PipelineError(f"{what}={name} is not a function")
    return obj
