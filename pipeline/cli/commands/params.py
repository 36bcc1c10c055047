"""`trt-pipeline params`: compose conf/ into params.yaml."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    pa = sub.add_parser("params", help="compose conf/ into params.yaml")
    pa.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. precision=fp16")
    pa.add_argument("--conf", default="conf")
    pa.add_argument("--out", default="params.yaml")
    pa.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.cli import params_file
    from pipeline.core import fileio

    fileio.write_text(args.out, params_file.compose(list(args.overrides), Path(args.conf)))
    print(f"wrote {args.out}")
    return 0
