"""The config `trt-pipeline init` writes for several models, and `trt-pipeline add-model`:
conf/config.yaml selects conf/models/<name>.yaml, one file per model (Hydra places each at
models.<name>), and dvc.yaml runs every stage per model (files/dvc_models.yaml.in)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pipeline.core.errors import PipelineError
from pipeline.core.layout import model_name_problem
from pipeline.core.stage_names import PER_MODEL

# The line of conf/config.yaml that lists the models; add-model extends it.
LIST_LINE = re.compile(r"^  - models: \[(?P<names>[^\]]*)\]$", re.M)


# conf/config.yaml's opening comment in a project of several models.
SEVERAL_HEADER = (
    "# Written by `trt-pipeline init`: this repository's settings on top of the installed",
    "# trt-pipeline's config groups, found on Hydra's search path. Each model is a file",
    "# conf/models/<name>.yaml (its model, precision, profile and calibration); the",
    "# build, benchmark and inspect groups below are shared. `trt-pipeline add-model",
    "# PATH` adds one; then `trt-pipeline params` (or `dvc exp run -S ...`).",
)


def config_yaml(names: list[str]) -> str:
    return "\n".join(
        [
            *SEVERAL_HEADER,
            "defaults:",
            "  - trt_pipeline",
            f"  - models: [{', '.join(names)}]",
            "  # The one-model groups are each model's here: left out of params.yaml, which",
            "  # DVC reads once for every stage that tracks a param.",
            *[f"  - override /{group}: null" for group in PER_MODEL],
            "  - _self_",
            "",
            "hydra:",
            "  searchpath:",
            "    - pkg://pipeline.conf",
            "",
        ]
    )


def model_header(name: str) -> list[str]:
    """conf/models/<name>.yaml's opening lines: Hydra reads its package from the first."""
    return [
        f"# @package models.{name}",
        f"# The model {name!r}: each group an option of the installed trt-pipeline with this",
        "# model's changes below it. Another precision: `/precision@precision: fp16`.",
    ]


def model_yaml(name: str, onnx_path: str) -> str:
    return "\n".join(
        [
            *model_header(name),
            "defaults:",
            "  - /model@model: onnx_file",
            "  - /precision@precision: fp32",
            "  - /profile@profile: dynamic",
            "  - /calibration@calibration: none",
            "  - _self_",
            "",
            "model:",
            "  name: " + json.dumps(name),
            "  onnx_path: " + json.dumps(onnx_path),
            "# Each dynamic input's shapes, said once (min, opt, max; the sample inputs take",
            "# opt), whatever its dims are called; the first run lists any that are missing:",
            "# profile:",
            "#   shapes: {x: [1x3x320x320, 1x3x640x640, 4x3x1280x1280]}",
            "",
        ]
    )


def names_of(paths: list[str], given: list[str] | None = None) -> list[str]:
    """Each model's name: `given`, else its file's stem; distinct, each a plain name."""
    names = given or [Path(p).stem for p in paths]
    for name in names:
        if problem := model_name_problem(name):
            raise PipelineError(f"--model: {problem}; rename the file or give --name")
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise PipelineError(f"two models would be named {twice!r}; give each a --name")
    return names


def listed(config_text: str) -> list[str]:
    """The models conf/config.yaml lists, as init wrote the line."""
    found = LIST_LINE.search(config_text)
    if found is None:
        raise PipelineError(
            "conf/config.yaml has no `  - models: [...]` line in its defaults (a project of "
            "one model, or an edited list): add the model to it by hand (docs/models.md)"
        )
    return [n.strip() for n in found["names"].split(",") if n.strip()]


def with_model(config_text: str, name: str) -> str:
    names = listed(config_text)
    if name in names:
        raise PipelineError(f"conf/config.yaml lists a model {name!r} already")
    return LIST_LINE.sub(f"  - models: [{', '.join([*names, name])}]", config_text, count=1)
