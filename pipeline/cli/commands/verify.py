"""`trt-pipeline verify ENGINE`: whether an engine is current on this machine, and why not."""

from __future__ import annotations

import argparse

from pipeline.cli.commands import Subparsers, add_engine_parser


def add_parser(sub: Subparsers) -> None:
    add_engine_parser(sub, "verify", "say whether ENGINE is current here, and why not", run)


def run(args: argparse.Namespace) -> int:
    from pipeline.cli import engine_check

    return engine_check.verify_engine(args.engine, args.params)
