"""Hydra overrides checked against conf/ and the schema before anything is handed on
(`params`, `exp run -S`, `run`), so a misspelt key or option is one line naming it and
the nearest valid ones, not Hydra's or DVC's multi-line error."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Iterable

from pipeline.core.errors import PipelineError

def nearest(word: str, choices: Iterable[str], n: int = 3) -> str:
    choices = sorted(set(choices))
    close = difflib.get_close_matches(word, choices, n=n, cutoff=0.5)
    return ", ".join(close or choices[:n])


def groups(conf_dir: Path) -> dict[str, list[str]]:
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in sorted(conf_dir.iterdir()) if d.is_dir()}


def _compose(conf_dir: Path, overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    try:
        with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base=None):
            return compose("config", overrides=overrides)
    except HydraException as e:  # a missing config or plugin: one line, no traceback
        raise PipelineError(f"cannot compose {conf_dir}: {str(e).strip().splitlines()[0]}") from None


def _parse(overrides: list[str]) -> list[Any]:
    """Hydra's own parser: the same grammar `compose` and `dvc exp run -S` apply."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as e:
        raise PipelineError(f"cannot read override: {str(e).strip().splitlines()[0]} "
                            f"(expected key=value, e.g. precision=fp16)") from None


def _values(o: Any) -> list[str]:
    """The values an override sets, one per sweep job."""
    if o.is_sweep_override():
        try:
            return list(o.sweep_string_iterator())
        except Exception:  # an interval sweep has no finite list: the schema judges it later
            return []
    return [] if o.value() is None else [o.get_value_element_as_str()]


def _check_key(tree: Any, key: str, original: str) -> None:
    """Walk the composed config; a list or a dict with no keys yet (free-form, like
    profile shapes) ends the check there and the schema judges the rest."""
    node, path = tree, []
    for part in key.split("."):
        if isinstance(node, list) or (isinstance(node, dict) and not node):
            return
        if not isinstance(node, dict) or part not in node:
            keys = [".".join([*path, k]) for k in node] if isinstance(node, dict) else []
            raise PipelineError(f"unknown config key '{'.'.join([*path, part])}' in '{original}' "
                                f"(nearest: {nearest('.'.join([*path, part]), keys)})")
        node, path = node[part], [*path, part]


def check(overrides: list[str], conf_dir: str | Path = "conf") -> Any:
    """The composition (checked by the schema) the overrides give; PipelineError naming the key
    and the nearest valid ones otherwise. Sweep values (a,b) are checked one by one."""
    from pipeline.core import config

    conf_dir = Path(conf_dir)
    options = groups(conf_dir)
    picks, keyed, single = [], [], []
    for text, o in zip(overrides, _parse(overrides)):
        key, values = o.key_or_group, _values(o)
        if re.split(r"[./]", key)[0] == "hydra":  # Hydra's own settings and launchers
            continue
        first = f"{o.get_key_element()}={values[0]}" if values else text
        single.append(first)
        if key in options and not o.is_delete():
            for choice in values:
                if choice not in options[key]:
                    raise PipelineError(f"no option '{choice}' in config group '{key}' "
                                        f"(nearest: {nearest(choice, options[key])}; all: {', '.join(options[key])})")
            picks.append(first)
        else:
            keyed.append((o.get_key_element()[: -len(key)], key, text))
    from omegaconf import OmegaConf

    tree = OmegaConf.to_container(_compose(conf_dir, picks), resolve=False)
    for prefix, key, text in keyed:
        if prefix in ("", "~"):
            _check_key(tree, key, text)
        elif "." in key:  # +key adds a key: its parent must exist and the schema must allow it
            _check_key(tree, key.rsplit(".", 1)[0], text)
    # One composition of the first value of each sweep, through the schema: wrong types.
    raw = _compose(conf_dir, single)
    config.validate(raw)
    return raw
