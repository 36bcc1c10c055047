"""One module per `trt-pipeline` command, as DVC's `dvc/commands/<cmd>.py`: each adds its
own parser (`add_parser`, whose `func` default is its `run`) and runs it. cli/main.py
lists them in the order `--help` and docs/reference/cli.md show."""

from __future__ import annotations

import argparse
from typing import TypeAlias

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
