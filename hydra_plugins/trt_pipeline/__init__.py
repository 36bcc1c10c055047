"""Hydra finds this package (namespace `hydra_plugins`) on sys.path and imports it
before composing: in `python -m pipeline.cli.run`, `python -m pipeline params`, the tests,
and DVC's `exp run -S` (DVC adds the repository root, its default `hydra.plugins_path`).

It registers `schema/open_dims`, which every model option lists first in its defaults
(and `schema/open_shapes`, which every profile option lists, for `profile.shapes`):
the model's name-keyed mappings (`sample_dims`, `input_ranges`, `sample_axis`,
`constant_inputs`, `output_tasks`) with their struct flag off, so an override may name any
dim, input or output (`model.sample_dims={batch: 4, seq: 32}`, `model.constant_inputs.sr=16000`)
without `+`.
Hydra closes every other mapping; this is the one a user must be able to extend, and
YAML cannot open it: a flag lives only on a config node, hence a ConfigStore entry.

It also registers two resolvers: `trt_jobdir`, which names multirun job folders
(jobdir.py), and `trt_or` (`${trt_or:${a},b}`: a, or b where a is null): a path that
dvc.yaml templates as a dependency can never be null, yet the setting it follows may be
(`model.reference_source` follows `model.reference_data`).

`trt_zoo` (`${trt_zoo:}`, `${trt_zoo:onnx/tiny_mlp.onnx}`) is the path of the bundled
models (pipeline/zoo) as a stage's process imports them: ./pipeline/zoo in a checkout of
trt-pipeline (`python -m stages.x` puts the checkout first on sys.path), else the
installed package's folder, relative where it lies under the working directory."""

import importlib.util
import os
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

# checked_sweeper registers the sweeper with Hydra's ConfigStore when imported.
from hydra_plugins.trt_pipeline import checked_sweeper, jobdir  # noqa: F401

# Mappings keyed by a dim, input or output name, which an override may extend: the
# model's (schema/open_dims) and the profile group's per-input shapes (schema/open_shapes).
OPEN_KEYS = ("sample_dims", "input_ranges", "sample_axis", "constant_inputs", "output_tasks")
OPEN_PROFILE_KEYS = ("shapes",)


def _open(keys):
    node = OmegaConf.create({key: {} for key in keys})
    for key in keys:
        OmegaConf.set_struct(node[key], False)
    return node


ConfigStore.instance().store(group="schema", name="open_dims", node=_open(OPEN_KEYS))
ConfigStore.instance().store(group="schema", name="open_shapes", node=_open(OPEN_PROFILE_KEYS))
if not OmegaConf.has_resolver("trt_or"):
    OmegaConf.register_new_resolver(
        "trt_or", lambda value, default: default if value is None else value
    )


def _zoo(sub: str = "") -> str:
    here = Path("pipeline/zoo")
    # A checkout (its own pipeline package in the working directory) imports that one.
    if not Path("pipeline/__init__.py").is_file():
        spec = importlib.util.find_spec("pipeline.zoo")
        assert spec is not None and spec.submodule_search_locations, "pipeline.zoo not installed"
        here = Path(os.path.relpath(spec.submodule_search_locations[0]))
        if here.parts[:1] == ("..",):
            here = here.resolve()
    return (here / sub).as_posix() if sub else here.as_posix()


if not OmegaConf.has_resolver("trt_zoo"):
    OmegaConf.register_new_resolver("trt_zoo", _zoo)
jobdir.register()
