"""`trt-pipeline sweep-report`: summarise a Hydra multirun folder or DVC experiments."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.cli.commands import Subparsers
from pipeline.core.errors import PipelineError


def add_parser(sub: Subparsers) -> None:
    sw = sub.add_parser(
        "sweep-report", help="summarise a Hydra multirun folder (or DVC experiments with --dvc)"
    )
    sw.add_argument("folder", nargs="?", help="a multirun folder (hydra.sweep.dir)")
    sw.add_argument(
        "--dvc", action="store_true", help="summarise `dvc exp show --json` in this repository"
    )
    sw.add_argument(
        "--out", help="where to write sweep_summary.{md,csv} and sweep_pareto.{svg,png}"
    )
    sw.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.sweeps import sweep_table

    if args.dvc == (args.folder is not None):
        raise PipelineError("sweep-report needs a multirun folder or --dvc, not both")
    if args.dvc:
        rows, out, title = sweep_table.collect_dvc("."), Path(args.out or "."), "DVC experiments"
    else:
        rows, out, title = (
            sweep_table.collect(args.folder),
            Path(args.out or args.folder),
            Path(args.folder).name,
        )
    paths = sweep_table.write(rows, out, title)
    print(sweep_table.to_markdown(rows, title))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
