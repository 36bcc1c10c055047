"""Hydra overrides checked against conf/ and the schema before anything is handed on
(`params`, `exp run -S`, `run`), so a misspelt key or option is one line naming it and
the nearest valid ones, not Hydra's or DVC's multi-line error."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Iterable

from pipeline.core.errors import PipelineError

# An override: optional +/++/~, a dotted key (list indices allowed), '=' and a value.
_OVERRIDE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_][\w.\-/@]*)(?P<eq>=)?(?P<value>.*)$", re.S)


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


def _parse(text: str) -> tuple[str, str, str | None]:
    m = _OVERRIDE.match(text.strip())
    if not m or (not m["eq"] and m["prefix"] != "~"):
        raise PipelineError(f"cannot read override '{text}': expected key=value, e.g. precision=fp16")
    return m["prefix"] or "", m["key"], m["value"] if m["eq"] else None


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
    from omegaconf import OmegaConf

    from pipeline.core import config

    conf_dir = Path(conf_dir)
    options = groups(conf_dir)
    picks, keyed = [], []
    for text in overrides:
        prefix, key, value = _parse(text)
        if re.split(r"[./]", key)[0] == "hydra":  # Hydra's own settings and launchers
            continue
        if key in options and "." not in key and not (value or "").startswith(("{", "[")):
            for choice in (value or "").split(","):
                if choice and "(" not in choice and choice not in options[key]:
                    raise PipelineError(f"no option '{choice}' in config group '{key}' "
                                        f"(nearest: {nearest(choice, options[key])}; all: {', '.join(options[key])})")
            picks.append(f"{key}={(value or '').split(',')[0]}")
        else:
            keyed.append((prefix, key, text))
    tree = OmegaConf.to_container(_compose(conf_dir, picks), resolve=False)
    for prefix, key, text in keyed:
        if prefix in ("", "~"):
            _check_key(tree, key, text)
        else:  # +key adds a key: its parent must exist and the schema must allow it
            parent = key.rsplit(".", 1)[0] if "." in key else ""
            if parent:
                _check_key(tree, parent, text)
    # One composition of the first value of each sweep, through the schema: wrong types.
    single = [t if "," not in t.split("=", 1)[-1] or "[" in t or "{" in t else t.split(",")[0] for t in overrides
              if not _parse(t)[1].startswith("hydra")]
    from hydra.errors import HydraException

    try:
        raw = _compose(conf_dir, single)
    except HydraException as e:
        raise PipelineError(" ".join(str(e).split("\n")[0].split())) from None
    config.validate(raw)
    return raw
