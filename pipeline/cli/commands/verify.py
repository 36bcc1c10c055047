"""`trt-pipeline verify ENGINE`: whether an engine is current on this machine, and why not."""

from __future__ import annotations

import argparse

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("verify", help="say whether ENGINE is current here, and why not")
    p.add_argument("engine", help="engine.plan or its build folder")
    p.add_argument("--params", default="params.yaml")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.cli import engine_check

    return engine_check.verify_engine(args.engine, args.params)
