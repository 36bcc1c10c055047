"""`trt-pipeline fingerprint`: this machine's engine fingerprint."""

from __future__ import annotations

import argparse
import json

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    fp = sub.add_parser("fingerprint", help="print this machine's engine fingerprint")
    fp.add_argument("--json", action="store_true")
    fp.add_argument(
        "--params",
        default="params.yaml",
        help="config to read build settings from ('' for defaults)",
    )
    fp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.core import config
    from pipeline.machine import fingerprint

    cfg = config.load(args.params) if args.params else config.validate({})
    fp = fingerprint.collect(cfg.build, require_trt=False)
    print(json.dumps(fp, indent=2, sort_keys=True) if args.json else fingerprint.describe(fp))
    return 0
