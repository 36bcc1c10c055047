"""`trt-pipeline stage NAME`: one DVC stage, as the dvc.yaml init writes calls it."""

from __future__ import annotations

import argparse

from pipeline.cli.commands import Subparsers
from pipeline.core.stages import STAGES


def add_parser(sub: Subparsers) -> None:
    sg = sub.add_parser("stage", help="run one DVC stage, as the dvc.yaml init writes calls it")
    sg.add_argument("name", choices=STAGES)
    sg.add_argument("--params", default="params.yaml")
    sg.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.cli import stage

    return stage.run(args.name, args.params)
