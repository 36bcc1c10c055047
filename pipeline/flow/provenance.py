"""Which params an output was made from. Each stage writes `made_from.json` into its
output; the next stage refuses an output made from other params (a failed or skipped
upstream run, a hand-run stage after `pipeline params`) with one line naming the
stage to rerun, instead of building or measuring the wrong thing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Required, TypedDict, cast

from pipeline.core import config, fileio, hashing, stage_names
from pipeline.core.errors import PipelineError

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig

FILE = "made_from.json"


class MadeFrom(TypedDict, total=False):
    """made_from.json: the stage, the config groups its output was made from, their hash."""

    stage: Required[str]
    params_sha256: Required[str]
    params: Required[dict[str, Any]]  # group -> its values (stage_names.made_from)
    model_sha256: str  # export: the model's own bytes
    source_sha256: str  # calibrate: the exported graph it was made from


def record(cfg: PipelineConfig, stage: str, **extra: str) -> MadeFrom:
    params = {k: _value(cfg, k) for k in stage_names.made_from(stage)}
    made = {"stage": stage, "params_sha256": hashing.sha256_json(params), "params": params}
    return cast(MadeFrom, {**made, **extra})


def _value(cfg: PipelineConfig, key: str) -> Any:
    """A config group (model, profile, ...) as plain data, or one dotted key's value
    (build.workspace_mib: the calibrate stage reads a few of the build group's)."""
    from omegaconf import OmegaConf

    if "." not in key:
        return config.to_dict(getattr(cfg, key))
    value = OmegaConf.select(cast(Any, cfg), key)  # the DictConfig validate() made
    return config.to_dict(value) if OmegaConf.is_config(value) else value


def write(folder: Path, cfg: PipelineConfig, stage: str, **extra: str) -> MadeFrom:
    rec = record(cfg, stage, **extra)
    fileio.write_json(Path(folder) / FILE, rec)
    return rec


def read(folder: Path, stage: str) -> MadeFrom:
    path = Path(folder) / FILE
    if not path.is_file():
        raise PipelineError(
            f"{folder} has no {FILE} (missing, or made by an older version); "
            f"rerun the {stage} stage"
        )
    rec = fileio.read_json(path, f"{stage} provenance")
    if (
        not isinstance(rec, dict)
        or not isinstance(rec.get("params"), dict)
        or rec.get("stage") != stage
    ):
        raise PipelineError(f"{path} is not a {stage} provenance record; rerun the {stage} stage")
    return cast(MadeFrom, rec)


def differences(rec: MadeFrom, cfg: PipelineConfig, stage: str) -> list[str]:
    """Dotted param names whose value differs between the output and `cfg`."""
    now = record(cfg, stage)["params"]
    out: list[str] = []

    def walk(a: object, b: object, prefix: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else k)
        elif a != b:
            out.append(prefix)

    walk(rec["params"], now, "")
    return out


def require(folder: Path, cfg: PipelineConfig, stage: str) -> MadeFrom:
    """The record, once it is shown to match `cfg`; else one line naming the stage to rerun."""
    rec = read(folder, stage)
    changed = differences(rec, cfg, stage)
    if changed:
        shown = ", ".join(changed[:3]) + (
            f" (+{len(changed) - 3} more)" if len(changed) > 3 else ""
        )
        raise PipelineError(
            f"{folder} was made from other params ({shown} differ); rerun the {stage} stage "
            f"(dvc repro)"
        )
    return rec
