"""`trt-pipeline reproduce ENGINE`: rebuild an engine's inputs and compare bytes."""

from __future__ import annotations

import argparse

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("reproduce", help="rebuild ENGINE's inputs and compare bytes")
    p.add_argument("engine", help="engine.plan or its build folder")
    p.add_argument("--params", default="params.yaml")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.cli import engine_check

    return engine_check.reproduce_engine(args.engine, args.params)
