"""Hydra finds this package (namespace `hydra_plugins`) on sys.path and imports it
before composing: in `python -m pipeline.cli.run`, `python -m pipeline params`, the tests,
and DVC's `exp run -S` (DVC adds the repository root, its default `hydra.plugins_path`).

It registers `schema/open_dims`, which every model option lists first in its defaults:
a `sample_dims` mapping whose struct flag is off, so an override may name any dim
(`model.sample_dims={batch: 4, seq: 32}`, `model.sample_dims.seq=64`) without `+`.
Hydra closes every other mapping; this is the one a user must be able to extend, and
YAML cannot open it: a flag lives only on a config node, hence a ConfigStore entry.

It also registers two resolvers: `trt_jobdir`, which names multirun job folders
(jobdir.py), and `trt_or` (`${trt_or:${a},b}`: a, or b where a is null): a path that
dvc.yaml templates as a dependency can never be null, yet the setting it follows may be
(`model.reference_source` follows `model.reference_data`)."""

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

# checked_sweeper registers the sweeper with Hydra's ConfigStore when imported.
from hydra_plugins.trt_pipeline import checked_sweeper, jobdir  # noqa: F401


def _open_dims():
    node = OmegaConf.create({"sample_dims": {}, "input_ranges": {}})
    for key in ("sample_dims", "input_ranges"):
        OmegaConf.set_struct(node[key], False)
    return node


ConfigStore.instance().store(group="schema", name="open_dims", node=_open_dims())
if not OmegaConf.has_resolver("trt_or"):
    OmegaConf.register_new_resolver(
        "trt_or", lambda value, default: default if value is None else value
    )
jobdir.register()
