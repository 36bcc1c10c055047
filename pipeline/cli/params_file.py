"""params.yaml as `trt-pipeline params`, `init` and `add-model` write it: conf/ composed
through the same checks as every override, holding values, not interpolations (as DVC's
own `dvc exp run -S` writes it), in JSON syntax where JSON can say every value.

JSON is YAML, so DVC, OmegaConf and any YAML reader take the file as before. It is
written as JSON because DVC parses params.yaml once for every stage that tracks a param
(15 in a project of three models, on every `dvc repro`): quoted keys and strings skip
YAML's guessing of each plain scalar's type, which is about a quarter of each parse, and
the always-run fingerprint stage reads it without importing a YAML parser
(benchmarks/several_models.py). `dvc exp run -S` writes the same values back as block
YAML; both read the same."""

from __future__ import annotations

import json
import math
from pathlib import Path


def compose(overrides: list[str], conf_dir: Path) -> str:
    """The text of params.yaml for conf/ with `overrides`."""
    from omegaconf import OmegaConf

    from pipeline.cli.overrides import check

    raw = check(overrides, conf_dir)
    OmegaConf.resolve(raw)
    return text(OmegaConf.to_container(raw))


def text(values: object) -> str:
    """`values` as JSON, or as block YAML where a YAML reader would not read the JSON back
    as it was: `1e-05` (no dot) is a string to PyYAML (YAML 1.1), `Infinity` is no YAML, a
    character past U+FFFF is a JSON surrogate pair YAML refuses, and a key must be a string."""
    if _reads_back(values):
        return json.dumps(values, indent=2) + "\n"
    import yaml

    return str(yaml.safe_dump(values, sort_keys=False, allow_unicode=True))


def _reads_back(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _in_bmp(k) for k in value) and all(
            _reads_back(v) for v in value.values()
        )
    if isinstance(value, list):
        return all(_reads_back(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value) and "." in repr(value)
    if isinstance(value, str):
        return _in_bmp(value)
    return value is None or isinstance(value, (bool, int))


def _in_bmp(s: str) -> bool:
    return all(ord(c) <= 0xFFFF for c in s)
