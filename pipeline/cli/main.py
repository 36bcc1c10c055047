"""`python -m pipeline <command>` (the `trt-pipeline` console script): tools around the
pipeline. Each command is a module of cli/commands/ with its own parser; `trt-pipeline
--help` and the generated reference (docs/reference/cli.md) list them, so nothing here
repeats them."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from types import ModuleType

from pipeline.cli import commands
from pipeline.core import exits

# The modules of cli/commands/, in the order `--help` lists them.
COMMANDS = (
    "run",
    "exp",
    "init",
    "stage",
    "fingerprint",
    "params",
    "cache",
    "verify",
    "reproduce",
    "status",
    "diff",
    "sweep_report",
    "package",
    "deploy",
    "releases",
)


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"pipeline.cli.commands.{name}")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trt-pipeline")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _Version(argparse.Action):
    """--version, read from the package metadata only when asked: importlib.metadata costs
    ~20 ms, and every DVC stage of an init'ed project is a `trt-pipeline stage` process."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(f"{parser.prog} {_version()}")
        parser.exit()


def parser(prog: str = "trt-pipeline", only: str | None = None) -> argparse.ArgumentParser:
    """The command line: each command adds its own parser (cli/commands/); `--help` of
    each is the reference. `only` builds one command's parser: every DVC stage of an
    init'ed project is a `trt-pipeline stage` process, the fingerprint's on every repro,
    and importing the other commands is most of its start-up."""
    p = argparse.ArgumentParser(prog=prog, description="TensorRT engine pipeline tools")
    p.add_argument("--version", action=_Version)
    p.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bars or stage tables (CI)"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="also show third-party log records")
    sub: commands.Subparsers = p.add_subparsers(dest="command", required=True)
    for name in (only,) if only else COMMANDS:
        _module(name).add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from pipeline.core.console import capture_third_party_logs, set_verbosity

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in ("-sc", "--shell-completion"):
        from pipeline.cli import run

        return run.complete(argv)
    at = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    # A known command parses with its own parser alone; anything else (no command, a
    # typo, top-level --help) with all of them, so the message lists them all.
    known = at is not None and argv[at] in COMMANDS and not {"-h", "--help"} & set(argv[:at])
    only = argv[at] if known and at is not None else None
    if only == "run" and at is not None:
        # Hydra's arguments pass as they are: argparse's REMAINDER refuses a leading flag
        # (`run --multirun a=1,2`: "unrecognized arguments").
        args = parser(only=only).parse_args([*argv[:at], "run"])
        args.hydra_args = argv[at + 1 :]
    else:
        args = parser(only=only).parse_args(argv)
    if args.quiet or args.verbose:
        set_verbosity(1 if args.verbose else -1)
        capture_third_party_logs()
    func: Callable[[argparse.Namespace], int] = args.func  # each parser's set_defaults
    return func(args)


def console() -> None:
    """The `trt-pipeline` console script."""
    exits.run(main)


if __name__ == "__main__":
    exits.run(main)
