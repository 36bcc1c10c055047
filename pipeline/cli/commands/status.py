"""`trt-pipeline status`: whether every stage is current on this machine."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    st = sub.add_parser(
        "status", help="exit 0 if every stage is current on this machine, 1 naming the stale one"
    )
    st.add_argument("--json", action="store_true")
    st.add_argument("--params", default="params.yaml")
    st.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.cli import status
    from pipeline.core import config

    cfg = config.load(args.params) if Path(args.params).exists() else config.validate({})
    return status.main(Path("."), args.json, cfg.build)
