"""The build settings the machine fingerprint depends on, read from params.yaml
without OmegaConf.

The DVC fingerprint stage runs on every `dvc repro` (always_changed), so its start-up
is part of every no-op repro. Importing OmegaConf and validating the whole config
there took longer than the probe itself (benchmarks/repro_noop.py). The stage reads
these four keys only; they are checked by the schema's own value rules
(pipeline/core/config_rules.py) and defaults (tests/machine/test_fingerprint.py holds them
equal to config.BuildConfig's). Every later stage validates the whole config.

params.yaml as `trt-pipeline params` writes it is JSON (pipeline/cli/params_file.py) and is
read as such, without importing a YAML parser; written by hand or by `dvc exp run -S` it
is block YAML, read with PyYAML's C loader."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pipeline.core.choices import Backend, HardwareCompatibility
from pipeline.core.errors import PipelineError, first_line


@dataclass(frozen=True)
class BuildSettings:
    backend: str = "auto"
    hardware_compatibility: str = "none"
    version_compatible: bool = False
    compute_capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Params:
    """What steps.fingerprint reads of a config: `.build`."""

    build: BuildSettings


def _invalid(key: str, value: object, expected: str) -> PipelineError:
    return PipelineError(f"invalid config: build.{key}={value!r}; expected {expected}")


def from_mapping(build: object) -> BuildSettings:
    """`build` as YAML parsed it (anything), checked as the schema would."""
    if build is None:
        build = {}
    if not isinstance(build, dict):
        raise PipelineError(f"invalid config: build must be a mapping, not {type(build).__name__}")
    # Values as YAML gave them, each checked below before it becomes a field.
    out: dict[str, Any] = {f.name: build[f.name] for f in fields(BuildSettings) if f.name in build}
    for key, allowed in (
        ("backend", tuple(Backend)),
        ("hardware_compatibility", tuple(HardwareCompatibility)),
    ):
        if key in out and out[key] not in allowed:
            raise _invalid(key, out[key], f"one of {', '.join(allowed)}")
    if "version_compatible" in out and not isinstance(out["version_compatible"], bool):
        raise _invalid("version_compatible", out["version_compatible"], "true or false")
    if "compute_capabilities" in out:
        caps = out["compute_capabilities"]
        if caps is None:
            caps = []
        # The schema says List[str]: a scalar is refused, numbers become strings (as OmegaConf does).
        if not isinstance(caps, list) or any(
            isinstance(c, (bool, list, dict)) or c is None for c in caps
        ):
            raise _invalid("compute_capabilities", caps, "a list of targets, e.g. [SM86, SM89]")
        out["compute_capabilities"] = tuple(str(c) for c in caps)
    return BuildSettings(**out)


def _yaml(text: str, path: Path) -> object:
    import yaml

    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise PipelineError(f"config {path} is not valid YAML: {first_line(e)}") from None


def load(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise PipelineError(f"config not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PipelineError(f"config {path} is unreadable: {first_line(e)}") from None
    try:
        raw = json.loads(text)
    except ValueError:
        raw = _yaml(text, path)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise PipelineError(f"config {path} is not a mapping of settings")
    return Params(build=from_mapping(raw.get("build")))
