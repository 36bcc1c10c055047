"""Several models in one project: the config's `models` mapping, name -> that model's own
groups (model, precision, profile, calibration), each composed by Hydra from
conf/models/<name>.yaml (written by `trt-pipeline init --model ... --model ...` or
`trt-pipeline add-model`). One model's config is the project's with those four groups in
place of its own; build, benchmark, inspect and sweep stay the project's.

A model's entry names all four groups (Hydra's `/precision@precision: fp16` composes a
whole one): dvc.yaml's stages of that model track `models.<name>` only, so a group taken
from the top level would change under them unseen."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline.core.errors import PipelineError
from pipeline.core.stage_names import PER_MODEL


def names(raw: Any) -> list[str]:
    """The models a config names, in its order; [] for a one-model project."""
    models = raw.get("models") if isinstance(raw, (dict, DictConfig)) else None
    return [str(k) for k in models.keys()] if models else []


def swept(raw: DictConfig) -> DictConfig:
    """A sweep job's config: the model `sweep.model` names where the config has several."""
    known = names(raw)
    chosen = (raw.get("sweep") or {}).get("model")
    if not known:
        if chosen is not None:
            raise PipelineError(f"sweep.model={chosen}: this project has one model")
        return raw
    if chosen is None:
        raise PipelineError(
            f"this project has several models ({', '.join(known)}): give the one the sweep "
            f"builds, e.g. sweep.model={known[0]}"
        )
    return select(raw, str(chosen))


def select(raw: DictConfig, name: str) -> DictConfig:
    """The config of model `name`: `raw` with its entry's groups in place of the top level's
    (and no `models`), for config.validate."""
    known = names(raw)
    if name not in known:
        listed = ", ".join(known) if known else "none: this project has one model"
        raise PipelineError(f"no model {name!r} in the config's models ({listed})")
    entry = raw["models"][name]
    if not isinstance(entry, DictConfig):
        raise PipelineError(f"models.{name} is not a mapping of its groups")
    if extra := [str(k) for k in entry if k not in PER_MODEL]:
        raise PipelineError(
            f"models.{name}.{extra[0]}: a model holds only its {', '.join(PER_MODEL)} "
            f"groups; build, benchmark and inspect are the project's"
        )
    if missing := [g for g in PER_MODEL if g not in entry]:
        raise PipelineError(
            f"models.{name} has no {missing[0]} group: each model names all of "
            f"{', '.join(PER_MODEL)} (conf/models/{name}.yaml, docs/models.md)"
        )
    one = OmegaConf.masked_copy(raw, [str(k) for k in raw if k != "models"])
    for group in PER_MODEL:
        one[group] = entry[group]
    return one


def check_override(raw: Any, key: str, package: str | None, line: str, group: bool) -> None:
    """Refuse an override of a one-model group at the top level (`precision=fp16`) in a
    project of several models: Hydra would compose a group that no model's stages read,
    and nothing would change. The message names the model's own place for it."""
    known = names(raw)
    head = key.split(".")[0]
    if not known or package or head not in PER_MODEL:
        return
    chosen = (raw.get("sweep") or {}).get("model")
    name = str(chosen) if chosen in known else known[0]
    value = line.partition("=")[2]
    own = (
        f"'{head}@models.{name}.{head}={value}'" if group else f"models.{name}.{line.lstrip('+~')}"
    )
    raise PipelineError(
        f"{line}: this project's models ({', '.join(known)}) each have their own {head}, "
        f"and the top level's is read by none; name a model's, e.g. {own}"
    )
