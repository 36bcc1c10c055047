"""One module per `trt-pipeline` command, as DVC's `dvc/commands/<cmd>.py`: each adds its
own parser (`add_parser`, whose `func` default is its `run`) and runs it. cli/main.py
lists them in the order `--help` and docs/reference/cli.md show."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeAlias

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_engine_parser(
    sub: Subparsers, name: str, text: str, run: Callable[[argparse.Namespace], int]
) -> None:
    """A command over one engine (verify, reproduce): ENGINE and the params it was built from."""
    p = sub.add_parser(name, help=text)
    p.add_argument("engine", help="engine.plan or its build folder")
    p.add_argument("--params", default="params.yaml")
    p.set_defaults(func=run)
