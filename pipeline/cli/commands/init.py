"""`trt-pipeline init`: set up a git repository for the pipeline."""

from __future__ import annotations

import argparse

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    it = sub.add_parser(
        "init",
        help="set up this git repository for the pipeline (dvc.yaml, conf/, params.yaml); "
        "runs dvc init if needed, nothing else",
    )
    it.add_argument(
        "--model", metavar="PATH", help="your ONNX model (model=onnx_file with this path)"
    )
    it.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.cli import init

    return init.main(args.model)
