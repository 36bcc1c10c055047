"""`trt-pipeline exp run`: `dvc exp run` with its -S overrides checked first."""

from __future__ import annotations

import argparse
import re
import sys

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    ex = sub.add_parser("exp", help="dvc exp run with -S overrides checked first")
    ex.add_argument("action", choices=["run"])
    ex.add_argument("--conf", default="conf")
    ex.add_argument(
        "dvc_args", nargs=argparse.REMAINDER, help="passed to dvc exp run, e.g. -S precision=fp16"
    )
    ex.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """`dvc exp run` with its -S overrides checked against conf/ and the schema first."""
    import shutil
    import signal
    import subprocess

    from pipeline.cli import overrides

    sets = [
        a.split(":", 1)[1] if re.match(r"^[\w./-]+\.yaml:", a) else a
        for flag, a in zip(args.dvc_args, args.dvc_args[1:])
        if flag in ("-S", "--set-param")
    ]
    sets += [a.split("=", 1)[1] for a in args.dvc_args if a.startswith("--set-param=")]
    overrides.check(sets, args.conf)
    dvc = shutil.which("dvc")
    argv = (
        [dvc, "exp", "run", *args.dvc_args]
        if dvc
        else [sys.executable, "-m", "dvc", "exp", "run", *args.dvc_args]
    )
    # DVC exits 255 when a stage fails; this tool's contract is 1 (130 when interrupted).
    rc = subprocess.call(argv)
    if rc == 0:
        return 0
    return 130 if rc in (130, -signal.SIGINT) else 1
