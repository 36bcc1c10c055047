"""`python -m pipeline <command>`: tools around the pipeline.

    python -m pipeline fingerprint [--json]    this machine's engine fingerprint
    python -m pipeline params [OVERRIDE ...]   write params.yaml from conf/ (what DVC does on exp run -S)
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


def _params(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pipeline import config, fileio

    with initialize_config_dir(config_dir=str(Path(args.conf).resolve()), version_base=None):
        raw = compose("config", overrides=list(args.overrides))
    config.validate(raw)
    fileio.write_text(args.out, OmegaConf.to_yaml(raw))
    print(f"wrote {args.out}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline", description="TensorRT engine pipeline tools")
    sub = p.add_subparsers(dest="command", required=True)
    fp = sub.add_parser("fingerprint", help="print this machine's engine fingerprint")
    fp.add_argument("--json", action="store_true")
    fp.add_argument("--params", default="params.yaml", help="config to read build settings from ('' for defaults)")
    fp.set_defaults(func=_fingerprint)
    pa = sub.add_parser("params", help="compose conf/ into params.yaml")
    pa.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. precision=fp16")
    pa.add_argument("--conf", default="conf")
    pa.add_argument("--out", default="params.yaml")
    pa.set_defaults(func=_params)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    cli.run(main)
