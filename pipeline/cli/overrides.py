"""Hydra overrides checked against conf/ and the schema before anything is handed on
(`params`, `exp run -S`, `run`), so a misspelt key or option is one line naming it and
the nearest valid ones, not Hydra's or DVC's multi-line error.

A sweep (`a,b`, `choice()`, `range()`, `glob()`) is expanded as Hydra's basic sweeper
expands it, and every value it names is checked, not just the first: a bad value found
by the sweep's tenth job would otherwise come after nine jobs' worth of work."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pipeline.core import models
from pipeline.core.errors import PipelineError

if TYPE_CHECKING:
    from omegaconf import DictConfig

# The job overrides (Hydra's own left out, in order) of the last multirun that check()
# passed in this process: the sweeper then skips composing each job twice
# (hydra_plugins/trt_pipeline/checked_sweeper.py).
checked_sweep: tuple[str, ...] | None = None


def nearest(word: str, choices: Iterable[str], n: int = 3) -> str:
    choices = sorted(set(choices))
    close = difflib.get_close_matches(word, choices, n=n, cutoff=0.5)
    return ", ".join(close or choices[:n])


@contextlib.contextmanager
def _hydra(conf_dir: Path) -> Iterator[Any]:
    """Hydra's config loader over conf/ (its plugins' groups, e.g. hydra/launcher, too)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base=None):
        yield GlobalHydra.instance().config_loader()


def _compose(conf_dir: Path, overrides: list[str], with_hydra: bool = False) -> DictConfig:
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return compose("config", overrides=overrides, return_hydra_config=with_hydra)
    # A missing config or plugin, or a value Hydra cannot place (`precision=null`): one line.
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise PipelineError(
            f"cannot compose {conf_dir}: {str(e).strip().splitlines()[0]}"
        ) from None


def _parse(overrides: list[str]) -> list[Any]:
    """Hydra's own parser: the same grammar `compose` and `dvc exp run -S` apply."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as e:
        raise PipelineError(
            f"cannot read override: {str(e).strip().splitlines()[0]} "
            f"(expected key=value, e.g. precision=fp16)"
        ) from None


def _options(loader: Any, key: str) -> list[str]:
    from hydra.core.object_type import ObjectType

    # Named, the primary config's hydra.searchpath applies: a repository's conf/ lists its
    # own options and the package's (pkg://pipeline.conf) together, as compose sees them.
    return sorted(
        loader.get_group_options(key, results_filter=ObjectType.CONFIG, config_name="config")
    )


def _values(o: Any, options: list[str], sweeps: bool) -> list[str]:
    """The values an override sets, one per sweep job, as the basic sweeper expands them."""
    from hydra.core.override_parser.types import Glob

    text, key = o.input_line, o.key_or_group
    if o.is_sweep_override() and not sweeps:
        raise PipelineError(
            f"'{text}' is a sweep: add --multirun to run one job per value "
            f"(a list is key=[a,b]; a string with a comma is quoted, key='a,b')"
        )
    if o.is_interval_sweep():
        raise PipelineError(
            f"'{text}': interval() needs a sampling sweeper (e.g. Optuna); the basic sweeper "
            f"takes a,b lists, choice(), range() and glob()"
        )
    if isinstance(o.value(), Glob):
        if not options:
            raise PipelineError(
                f"'{text}': glob() picks options of a config group and '{key}' is not one"
            )
        values: list[str] = o.value().filter(options)
        if not values:
            raise PipelineError(
                f"'{text}' matches no option of config group '{key}' (all: {', '.join(options)})"
            )
        return values
    if o.is_sweep_override():
        values = list(o.sweep_string_iterator())
        if not values:
            raise PipelineError(f"'{text}' sweeps over no values: the sweep would run no job")
        return values
    return [] if o.value() is None else [o.get_value_element_as_str()]


def _check_key(tree: object, key: str, original: str) -> None:
    """Walk the composed config; a list or a dict with no keys yet (free-form, like
    profile shapes) ends the check there and the schema judges the rest."""
    node = tree
    path: list[str] = []
    for part in key.split("."):
        if isinstance(node, list) or (isinstance(node, dict) and not node):
            return
        if not isinstance(node, dict) or part not in node:
            keys = [".".join([*path, k]) for k in node] if isinstance(node, dict) else []
            raise PipelineError(
                f"unknown config key '{'.'.join([*path, part])}' in '{original}' "
                f"(nearest: {nearest('.'.join([*path, part]), keys)})"
            )
        node, path = node[part], [*path, part]


def _expand(
    loader: Any, overrides: list[str], sweeps: bool
) -> list[tuple[Any, list[str], list[str]]]:
    """(override, the values it sweeps over, its group's options or [] for a key) each."""
    items = []
    for o in _parse(overrides):
        options = _options(loader, o.key_or_group)
        values = _values(o, options, sweeps)
        for choice in values if options and not o.is_delete() else []:
            if choice not in options:
                raise PipelineError(
                    f"no option '{choice}' in config group '{o.key_or_group}' "
                    f"(nearest: {nearest(choice, options)}; all: {', '.join(options)})"
                )
        items.append((o, values, options))
    return items


def _check_keys(tree: dict[str, Any], items: list[Any]) -> None:
    for o, _, options in items:
        if options and not o.is_delete():
            continue
        if (
            o.is_add() or o.is_force_add()
        ):  # +key adds a key: its parent must exist, the schema must allow it
            if "." in o.key_or_group:
                _check_key(tree, o.key_or_group.rsplit(".", 1)[0], o.input_line)
            continue
        try:
            _check_key(tree, o.key_or_group, o.input_line)
        except PipelineError as e:
            if not o.key_or_group.startswith("hydra.launcher."):
                raise
            launcher = tree["hydra"]["launcher"]["_target_"].rsplit(".", 1)[-1]
            raise PipelineError(
                f"{e}; the launcher is {launcher}: pick another first, e.g. hydra/launcher=joblib"
            ) from None


def _check_folders(tree: dict[str, Any], items: list[Any]) -> None:
    """Hydra names a job's folder by its overrides less some keys: two jobs that differ
    only there (or a value listed twice) would write into one folder."""
    left_out = set(tree["hydra"]["job"]["config"]["override_dirname"]["exclude_keys"])
    for o, values, _ in items:
        if o.is_hydra_override() or len(values) < 2:
            continue
        if o.key_or_group in left_out and len(set(values)) > 1:
            raise PipelineError(
                f"'{o.input_line}': job folders leave {o.key_or_group} out of their names "
                f"(hydra.job.config.override_dirname.exclude_keys), so these jobs would share "
                f"one folder; run one sweep per value, each with its own hydra.sweep.dir"
            )
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise PipelineError(
                f"'{o.input_line}' lists {', '.join(twice)} more than once: "
                f"those jobs would share one folder"
            )


def check(
    overrides: list[str], conf_dir: str | Path = "conf", multirun: bool | None = None
) -> DictConfig:
    """The composition (checked by the schema) the overrides give, each sweep at its first
    value; PipelineError naming the key and the nearest valid ones otherwise. `multirun`
    None (DVC's -S, params): a sweep is checked value by value; False: a sweep is refused
    (Hydra without --multirun); True: each job must also get a folder of its own."""
    global checked_sweep
    checked_sweep = None  # until this check has passed
    conf_dir = Path(conf_dir)
    with _hydra(conf_dir) as loader:
        items = _expand(loader, overrides, sweeps=multirun is not False)
        first = [
            f"{o.get_key_element()}={values[0]}" if values else o.input_line
            for o, values, _ in items
        ]
        composed, tree = _compose_checked(conf_dir, items, first)
        for o, _, options in items:  # before each sweep value is composed and validated
            if not o.is_hydra_override():
                models.check_override(tree, o.key_or_group, o.package, o.input_line, bool(options))
        if multirun:
            _check_folders(tree, items)
        raw = _validate_jobs(conf_dir, composed, items, first)
    if multirun:
        checked_sweep = tuple(o.input_line for o, _, _ in items if not o.is_hydra_override())
    return raw


def _compose_checked(
    conf_dir: Path, items: list[tuple[Any, list[str], list[str]]], first: list[str]
) -> tuple[DictConfig, dict[str, Any]]:
    """The first job composed with Hydra's settings, as it is and as a plain tree, once
    every override's key has been checked."""
    from omegaconf import OmegaConf

    # Keys, Hydra's own (hydra.launcher.n_jobs) too, are checked against what the group
    # picks compose before any key is set, added or deleted: Hydra names an unknown key
    # without the valid ones, and an added one (+a.b) creates its parents. With no key
    # added or deleted, the whole job composed is that tree where it composes at all.
    edits = any(o.is_add() or o.is_force_add() or o.is_delete() for o, _, _ in items)
    composed: DictConfig | None = None
    if not edits:
        # The key check names the key; else raised below.
        with contextlib.suppress(PipelineError):
            composed = _compose(conf_dir, first, with_hydra=True)
    if composed is None:
        _check_keys_against_picks(conf_dir, items, first)
        composed = _compose(conf_dir, first, with_hydra=True)
    tree = cast(dict[str, Any], OmegaConf.to_container(composed, resolve=False))
    if not edits:
        _check_keys(tree, items)
    return composed, tree


def _check_keys_against_picks(
    conf_dir: Path, items: list[tuple[Any, list[str], list[str]]], first: list[str]
) -> None:
    """The keys checked against the config the group picks alone compose."""
    from omegaconf import OmegaConf

    picks = [line for line, (o, _, options) in zip(first, items) if options and not o.is_delete()]
    # A composed config (a DictConfig) becomes a dict; to_container's type also
    # covers lists and scalars.
    _check_keys(
        cast(
            dict[str, Any],
            OmegaConf.to_container(_compose(conf_dir, picks, with_hydra=True), resolve=False),
        ),
        items,
    )


def _validate_jobs(
    conf_dir: Path,
    composed: DictConfig,
    items: list[tuple[Any, list[str], list[str]]],
    first: list[str],
) -> DictConfig:
    """The job config (Hydra's settings dropped) once it has passed the schema."""
    from omegaconf import open_dict

    from pipeline.core import config

    # Through the schema (wrong types): the first value of each sweep, then each other
    # value with the rest at their first; Hydra's own settings were composed above.
    with open_dict(composed):
        del composed["hydra"]
    raw = composed
    config.validate(raw)
    job = [i for i, (o, _, _) in enumerate(items) if not o.is_hydra_override()]
    for i in job:
        o, values, _ = items[i]
        for value in dict.fromkeys(values[1:]):
            line = f"{o.get_key_element()}={value}"
            try:
                config.validate(_compose(conf_dir, [line if j == i else first[j] for j in job]))
            except PipelineError as e:
                raise PipelineError(f"{e} (the job with {line} of '{o.input_line}')") from None
    return raw
