"""A project of one model made one of several, for `trt-pipeline add-model`: the model's
own groups move out of conf/config.yaml into conf/models/<name>.yaml, as `init --model a
--model b` would have written them, and the config lists the models instead.

What moves: each `override <group>: <option>` default of the four one-model groups (model,
precision, profile, calibration) and each of their top-level blocks, with the comments
that lie inside them. Everything else (build, benchmark, inspect, hydra, sweep, other
defaults) stays the project's. The YAML is edited with ruamel.yaml's round trip, which
keeps the user's comments and layout; PyYAML would drop them."""

from __future__ import annotations

import io
import re
from typing import Any

from pipeline.cli.init import several
from pipeline.core.errors import PipelineError
from pipeline.core.stage_names import PER_MODEL

# `override model: onnx_file` or `override /model: onnx_file` in the defaults list.
OVERRIDE = re.compile(r"^override\s+/?(?P<group>\w+)$")


def _yaml() -> Any:
    from ruamel.yaml import YAML

    y = YAML()
    y.indent(mapping=2, sequence=4, offset=2)  # `  - item`, as init writes lists
    y.width = 4096
    y.preserve_quotes = True
    # `override /model: null`, as init writes it, not an empty value
    y.representer.add_representer(
        type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    return y


def _dump(data: Any) -> str:
    out = io.StringIO()
    _yaml().dump(data, out)
    return out.getvalue()


def _package_choices() -> dict[str, str]:
    """The installed config's option of each one-model group (`- precision: fp32`), which
    a project's config leaves as it is unless it overrides it."""
    from importlib import resources

    import yaml

    text = resources.files("pipeline").joinpath("conf", "trt_pipeline.yaml").read_text()
    entries = yaml.safe_load(text)["defaults"]
    return {k: str(v) for e in entries if isinstance(e, dict) for k, v in e.items()}


def to_several(config_text: str, name: str) -> tuple[str, str]:
    """(conf/config.yaml listing [name], conf/models/<name>.yaml) from a one-model
    conf/config.yaml."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    doc = _yaml().load(config_text)
    defaults = doc.get("defaults") if isinstance(doc, dict) else None
    if not isinstance(defaults, list) or "_self_" not in defaults:
        raise PipelineError(
            "conf/config.yaml has no defaults list with _self_: move its model into "
            "conf/models/<name>.yaml by hand (docs/models.md)"
        )
    choices = _package_choices()
    for entry in list(defaults):
        group = _overridden_group(entry)
        if group in PER_MODEL:
            choices[group] = str(next(iter(entry.values())))
            defaults.remove(entry)
    listed = CommentedSeq([name])
    listed.fa.set_flow_style()
    defaults.insert(defaults.index("_self_"), CommentedMap({"models": listed}))
    for group in PER_MODEL:
        defaults.insert(defaults.index("_self_"), CommentedMap({f"override /{group}": None}))
    own = CommentedMap()
    own["defaults"] = CommentedSeq(
        [CommentedMap({f"/{g}@{g}": choices[g]}) for g in PER_MODEL] + ["_self_"]
    )
    for group in PER_MODEL:
        if group in doc:
            own[group] = doc.pop(group)
    return _dump(doc), "\n".join(several.model_header(name)) + "\n" + _dump(own)


def _overridden_group(entry: object) -> str | None:
    if isinstance(entry, dict) and len(entry) == 1:
        found = OVERRIDE.match(str(next(iter(entry))))
        return found["group"] if found else None
    return None


def without_stages(lock_text: str, names: tuple[str, ...]) -> str:
    """dvc.lock without the entries of stages dvc.yaml no longer has: DVC keeps an entry
    of a stage that is gone, and parses it on every `dvc repro`."""
    lock = _yaml().load(lock_text)
    for name in names:
        lock.get("stages", {}).pop(name, None)
    return _dump(lock)


def outputs(stages: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    """The paths the stages `names` write (dvc.yaml's outs, metrics and plots)."""
    found = []
    for name in names:
        spec = stages.get(name) or {}
        for kind in ("outs", "metrics", "plots"):
            for out in spec.get(kind) or []:
                found.append(str(next(iter(out)) if isinstance(out, dict) else out))
    return found
