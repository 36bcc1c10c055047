"""`trt-pipeline params`: compose conf/ into params.yaml."""

from __future__ import annotations

import argparse

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    pa = sub.add_parser("params", help="compose conf/ into params.yaml")
    pa.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. precision=fp16")
    pa.add_argument("--conf", default="conf")
    pa.add_argument("--out", default="params.yaml")
    pa.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from pipeline.cli import overrides
    from pipeline.core import fileio

    raw = overrides.check(list(args.overrides), args.conf)
    OmegaConf.resolve(raw)  # as DVC does: params.yaml holds values, not interpolations
    fileio.write_text(args.out, OmegaConf.to_yaml(raw))
    print(f"wrote {args.out}")
    return 0
