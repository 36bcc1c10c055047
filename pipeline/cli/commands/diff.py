"""`trt-pipeline diff A B`: compare a build with a baseline."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    di = sub.add_parser("diff", help="compare build B with baseline A (build or inspect folders)")
    di.add_argument(
        "a",
        help="baseline: build or inspect folder, engine-store key (prefix), DVC experiment or git "
        "revision",
    )
    di.add_argument("b", help="the build to judge, same kinds")
    di.add_argument(
        "--store", help="engine store for keys (default: $TRT_PIPELINE_STORE, .cache/engines)"
    )
    di.add_argument("--json", action="store_true", help="machine-readable output")
    di.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when B has a lower fusion ratio or a layer at a wider precision than A",
    )
    di.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.analysis import diff
    from pipeline.cli import diff_targets

    with diff_targets.temp_dir() as work:
        a, b = (diff_targets.diff_source(x, args.store, Path(work)) for x in (args.a, args.b))
        result = diff.compare(diff.load(a), diff.load(b))
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else diff.format_table(result))
    if args.fail_on_regression:
        diff.gate(result)
    return 0
