"""`python -m pipeline <command>`: tools around the pipeline.

    python -m pipeline fingerprint [--json]    this machine's engine fingerprint
"""

from __future__ import annotations

import argparse
import json

from pipeline import cli


def _fingerprint(args: argparse.Namespace) -> int:
    from pipeline import config, fingerprint

    cfg = config.load(args.params) if args.params else config.validate({})
    fp = fingerprint.collect(cfg.build)
    print(json.dumps(fp, indent=2, sort_keys=True) if args.json else fingerprint.describe(fp))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline", description="TensorRT engine pipeline tools")
    sub = p.add_subparsers(dest="command", required=True)
    fp = sub.add_parser("fingerprint", help="print this machine's engine fingerprint")
    fp.add_argument("--json", action="store_true")
    fp.add_argument("--params", default="params.yaml", help="config to read build settings from ('' for defaults)")
    fp.set_defaults(func=_fingerprint)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    cli.run(main)
