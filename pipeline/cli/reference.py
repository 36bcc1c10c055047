"""Reference pages made from the code, so they cannot drift from it: every config key
(type, default, which dvc.yaml stage reads it, what it does to the engine cache key,
its description) and the command line from its argparse parser. The docs site's hook
(docs/hooks/reference.py) writes them at build time; `python -m pipeline.cli.reference
DIR` writes them as files.

A key's description is the comment written beside or above its field in the schema
(pipeline/core/config.py): the schema stays plain dataclasses, and a key added without
one is caught by `undescribed()` (tests/cli/test_reference.py)."""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import inspect
import io
import json
import os
import sys
import textwrap
import tokenize
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core import config, dvc_yaml
from pipeline.core.errors import PipelineError


@dataclass(frozen=True)
class Key:
    path: str  # dotted; `[]` stands for any list item, `<name>` for any mapping key
    type: str
    description: str
    default: Any = None
    has_default: bool = False


def _comments(cls: type) -> dict[str, str]:
    """Field name -> its comment: the comment lines just above the field and those
    inside the field's own lines (a trailing comment, or one the formatter wrapped)."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    text = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    out = {}
    for node in typing.cast(ast.ClassDef, ast.parse(source).body[0]).body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        n, above = node.lineno - 1, list[str]()
        while n >= 1 and lines[n - 1].strip().startswith("#"):
            above.insert(0, text[n])
            n -= 1
        end = node.end_lineno or node.lineno
        inside = [text[i] for i in range(node.lineno, end + 1) if i in text]
        out[node.target.id] = " ".join(c for c in above + inside if c)
    return out


def _docstring(cls: type) -> str:
    doc = cls.__doc__ or ""
    # dataclass() writes the signature as __doc__ where a class has none.
    return "" if doc.startswith(cls.__name__ + "(") else " ".join(inspect.cleandoc(doc).split())


def _type_name(f: dataclasses.Field[Any]) -> str:
    """The annotation as written (the schema's module defers them: they are strings), each
    choice's enum followed by its values (pipeline/core/choices.py)."""
    import re
    from enum import StrEnum

    from pipeline.core import choices

    name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    enums = {
        n: e for n, e in vars(choices).items() if isinstance(e, type) and issubclass(e, StrEnum)
    }
    return re.sub(
        r"\b[A-Z]\w+\b",
        lambda m: f"{m[0]} ({', '.join(enums[m[0]])})" if m[0] in enums else m[0],
        name,
    )


def _inner_dataclass(t: Any) -> tuple[str, type] | None:
    """(path suffix, class) for a field holding dataclasses: itself, list items, map values."""
    if isinstance(t, type) and dataclasses.is_dataclass(t):
        return "", t
    args = typing.get_args(t)
    origin = typing.get_origin(t)
    item = args[0] if origin is list and args else args[1] if origin is dict else None
    if isinstance(item, type) and dataclasses.is_dataclass(item):
        return ("[]" if origin is list else ".<name>"), item
    return None


def _field_default(f: dataclasses.Field[Any]) -> tuple[Any, bool]:
    if f.default is not dataclasses.MISSING:
        return f.default, True
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value) or (
            isinstance(value, list) and value and dataclasses.is_dataclass(value[0])
        ):
            return None, False  # a group: its own keys carry the defaults
        return value, True
    return None, False


def keys(cls: type = config.PipelineConfig, prefix: str = "") -> list[Key]:
    """Every key of the schema, depth first, in the order the schema declares them
    (defaults are the schema's; `document()` puts conf/'s composition in their place)."""
    out = []
    comments = _comments(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path, t = f"{prefix}{f.name}", hints[f.name]
        inner = _inner_dataclass(t)
        text = comments.get(f.name, "") or (_docstring(inner[1]) if inner else "")
        default, has = _field_default(f)
        if inner is None or inner[0]:
            out.append(Key(path, _type_name(f), text, default, has))
        elif prefix:  # a nested group (build.gates): a row of its own
            out.append(Key(path, "group", text))
        if inner is not None:
            out += keys(inner[1], f"{path}{inner[0]}.")
    return out


def undescribed() -> list[str]:
    """Schema keys without a description."""
    return [k.path for k in keys() if not k.description]


def _reads(param: str, key: str) -> bool:
    return key == param or key.startswith(param + ".") or param.startswith(key + ".")


def _upstream_of(stages: dict[str, Any], target: str) -> list[str]:
    """Stages whose outputs reach `target` through its deps, nearest first."""

    def outs(s: dict[str, Any]) -> set[str]:
        return {o if isinstance(o, str) else next(iter(o)) for o in s.get("outs", [])}

    found: list[str] = []
    wanted = {d for d in stages[target].get("deps", []) if isinstance(d, str)}
    changed = True
    while changed:
        changed = False
        for name, s in stages.items():
            if name not in found and name != target and outs(s) & wanted:
                found.append(name)
                wanted |= set(s.get("deps", []))
                changed = True
    return found


def engine_key_effect(key: str, stages: dict[str, Any]) -> str:
    """What changing `key` does to the engine cache key (pipeline/engine/cache_key.py)."""
    from pipeline.engine import cache_key

    group, _, name = key.partition(".")
    field = name.split(".")[0].split("[")[0]
    if (group, field) == ("build", "plugins"):
        return "yes: the libraries' contents"
    if group == "models":
        return "per model, as its groups' keys above say"
    if (
        (group == "build" and field in cache_key.ENGINE_BUILD_FIELDS)
        or (group == "precision" and field in cache_key.ENGINE_PRECISION_FIELDS)
        or (group == "profile" and field == "profiles")
    ):
        return "yes"
    through = [
        s
        for s in _upstream_of(stages, "build")
        if any(_reads(p, key) for p in stages[s].get("params", []) if isinstance(p, str))
    ]
    if through:
        made = " and ".join(f"`{s}`" for s in reversed(through))
        return f"only if it changes what {made} make{'s' if len(through) == 1 else ''}"
    return "no"


def _readers(key: str, stages: dict[str, Any]) -> list[str]:
    return [
        name
        for name, body in stages.items()
        if any(_reads(p, key) for p in body.get("params", []) if isinstance(p, str))
    ]


# Open shape: DVC's YAML, stage name -> its dvc.yaml body (DVC's schema, not ours).
def _several_models_stages() -> dict[str, Any]:
    """The stages of the dvc.yaml `init` writes for several models, each `foreach` body
    as its stage."""
    from importlib import resources

    import yaml

    text = resources.files("pipeline").joinpath("cli/init/files/dvc_models.yaml.in").read_text()
    return {n: s.get("do", s) for n, s in yaml.safe_load(text)["stages"].items()}


def _read_by(key: str, stages: dict[str, Any], several: dict[str, Any]) -> str:
    """The stages of this repository's dvc.yaml that track `key`; for a key only a project
    of several models has (`models`), those of `several`, init's dvc.yaml for one."""
    if readers := _readers(key, stages):
        return ", ".join(f"`{s}`" for s in readers)
    per_model = _readers(key.replace("models.", "models.${key}.", 1), several)
    if per_model:
        return ", ".join(f"`{s}`" for s in per_model) + " (per model, in a project of several)"
    return "no stage (sweeps)"


def _yaml(value: Any) -> str:
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=False)
    return json.dumps(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def group_options(conf_dir: Path, group: str) -> list[str]:
    """The options of a config group as Hydra sees them (the package's and the user's)."""
    from pipeline.cli import overrides

    with overrides._hydra(conf_dir) as loader:
        return overrides._options(loader, group)


# Open shape: a config tree flattened, dotted key -> value: the keys are the config's own.
def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in tree.items():
        # sample_dims is one value (a given mapping replaces the default whole).
        if isinstance(v, dict) and v and k != "sample_dims":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def option_settings(conf_dir: Path, group: str, base: dict[str, Any]) -> list[str]:
    """One Markdown bullet per option of `group`: the keys it sets away from the default."""
    from omegaconf import OmegaConf

    from pipeline.cli import overrides

    lines = []
    for option in group_options(conf_dir, group):
        try:
            tree = OmegaConf.to_container(overrides.check([f"{group}={option}"], conf_dir))
        except PipelineError:  # an option that needs a setting of its own (model.folder)
            package = Path(__file__).parents[1] / "conf"
            found = [d / group / f"{option}.yaml" for d in (conf_dir, package)]
            own = OmegaConf.to_container(OmegaConf.load(next(f for f in found if f.is_file())))
            tree = {
                group: {
                    k: v for k, v in typing.cast(dict[str, Any], own).items() if k != "defaults"
                }
            }
        sets = {
            k: v
            for k, v in _flat(typing.cast(dict[str, Any], tree)).items()
            if k.startswith(group + ".") and base.get(k) != v
        }
        said = ", ".join(f"`{k.partition('.')[2]}={_yaml(v)}`" for k, v in sets.items())
        lines.append(f"- `{option}`: {said or 'the default'}")
    return lines


def config_page(repo: Path) -> str:
    """Markdown: one table per config group, from the schema, conf/ and dvc.yaml."""
    from omegaconf import OmegaConf

    from pipeline.cli import overrides

    stages, several = dvc_yaml.stages(repo), _several_models_stages()
    composed = overrides.check([], repo / "conf")
    base = _flat(typing.cast(dict[str, Any], OmegaConf.to_container(composed)))
    lines = [
        "# Config reference",
        "",
        "Generated from the schema (`pipeline/core/config.py`), `conf/` and `dvc.yaml` by",
        "`python -m pipeline.cli.reference docs`; a test keeps this file equal to what the code says.",
        "**Default** is the value of the default composition (what `dvc repro` uses);",
        "**read by** names the `dvc.yaml` stages that have the key in their params (a change",
        "reruns them); **engine key** says whether a change makes a different engine-store",
        "key (`pipeline/engine/cache_key.py`): *yes* for a key input, *only if it changes*",
        "where the key hashes what an earlier stage makes (the graph's bytes, the fingerprint),",
        "*no* where it changes how an engine is judged, measured or kept, never its bytes.",
        "Set a key with `dvc exp run -S key=value` or `trt-pipeline run key=value`.",
    ]
    groups: dict[str, list[Key]] = {}
    for k in keys():
        groups.setdefault(k.path.split(".")[0], []).append(k)
    for group, rows in groups.items():
        lines += ["", f"## {group}", ""]
        options = option_settings(repo / "conf", group, base)
        if options:
            lines += [f"Options (`{group}=NAME`) and what each sets:", "", *options, ""]
        lines += [
            "| key | type | default | read by | engine key | description |",
            "|---|---|---|---|---|---|",
        ]
        for k in rows:
            plain = "[" not in k.path and "<" not in k.path
            if k.type == "group":
                default = ""
            elif plain:
                default = f"`{_yaml(OmegaConf.select(composed, k.path, default=None))}`"
            else:
                default = f"`{_yaml(k.default)}`" if k.has_default else ""
            read_by = _read_by(k.path, stages, several)
            lines.append(
                f"| `{k.path}` | {_cell(k.type)} | {_cell(default)} | {read_by} "
                f"| {engine_key_effect(k.path, stages)} | {_cell(k.description)} |"
            )
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _columns(n: int) -> Iterator[None]:
    """argparse wraps help to the terminal; the page is written at one fixed width."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(n)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _commands(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield p
    for action in p._actions:  # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _commands(sub)


def cli_page() -> str:
    """Markdown: every command's help, as argparse prints it."""
    from pipeline.cli import main

    lines = [
        "# Command-line reference",
        "",
        "Generated from the parser (`pipeline/cli/main.py`) by `python -m pipeline.cli.reference docs`;",
        "a test keeps this file equal to what the code says.",
        "`trt-pipeline` and `python -m pipeline` are the same command.",
        "`trt-pipeline run` hands everything after it to Hydra (`python -m pipeline.cli.run`):",
        "its flags are Hydra's (`--multirun`, `--cfg job`, `-sc install=bash`).",
    ]
    with _columns(100):
        for p in _commands(main.parser()):
            lines += ["", f"## `{p.prog}`", "", "```text", p.format_help().rstrip(), "```"]
    return "\n".join(lines) + "\n"


def pages(repo: Path) -> dict[str, str]:
    """Site path -> Markdown, for every generated reference page."""
    return {"reference/config.md": config_page(repo), "reference/cli.md": cli_page()}


if __name__ == "__main__":
    from pipeline.core import fileio

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs")
    for name, text in pages(Path(".")).items():
        fileio.write_text(out / name, text)
        print(f"wrote {out / name}")
