"""`trt-pipeline reproduce ENGINE`: rebuild an engine's inputs and compare bytes."""

from __future__ import annotations

import argparse

from pipeline.cli.commands import Subparsers, add_engine_parser


def add_parser(sub: Subparsers) -> None:
    add_engine_parser(sub, "reproduce", "rebuild ENGINE's inputs and compare bytes", run)


def run(args: argparse.Namespace) -> int:
    from pipeline.cli import engine_check

    return engine_check.reproduce_engine(args.engine, args.params)
