"""`trt-pipeline stage NAME [--model M]`: one DVC stage, the same function stages/<name>.py
runs in this repository, for the dvc.yaml that `trt-pipeline init` writes into another one
(its commands call the installed package, so upgrading it changes no file there). In a
project of several models, each stage runs per model (--model) and `index` across them."""

from __future__ import annotations

import argparse

from pipeline.cli.commands import Subparsers
from pipeline.core.layout import Layout
from pipeline.core.stage_names import INDEX, STAGES


def add_parser(sub: Subparsers) -> None:
    sg = sub.add_parser("stage", help="run one DVC stage, as the dvc.yaml init writes calls it")
    sg.add_argument("name", choices=[*STAGES, INDEX])
    sg.add_argument("--params", default="params.yaml")
    sg.add_argument("--model", help="one model of the config's several (its `models` key)")
    sg.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.core.errors import PipelineError

    if args.name == "fingerprint":
        # Runs on every `dvc repro`: only the build settings it needs, not the whole
        # validated config (as stages/fingerprint.py), nor the other stages' imports.
        from pipeline.flow import fingerprint_stage
        from pipeline.machine import build_settings

        fingerprint_stage.run(build_settings.load(args.params), Layout())
        return 0
    from pipeline.core import config
    from pipeline.flow import stages

    if args.name == INDEX:
        stages.index(config.load(args.params), Layout())
        return 0
    cfg = config.load(args.params, args.model)
    if args.model is None and cfg.models:
        raise PipelineError(f"stage {args.name}: this project has several models; give --model")
    stages.BY_NAME[args.name](cfg, Layout(model=args.model))
    return 0
