"""`trt-pipeline run`: every stage for one composed config through the Hydra app."""

from __future__ import annotations

import argparse

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    ru = sub.add_parser(
        "run",
        help="every stage for one composed config through Hydra (same as python -m pipeline.cli.run)",
        add_help=False,
    )
    ru.add_argument(
        "hydra_args",
        nargs=argparse.REMAINDER,
        help="Hydra overrides and flags, e.g. --multirun a=1,2",
    )
    ru.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Hands the rest of the command line to the Hydra app (pipeline.cli.run), checked first."""
    from pipeline.cli.run import main_checked

    return main_checked(["trt-pipeline run", *args.hydra_args])
