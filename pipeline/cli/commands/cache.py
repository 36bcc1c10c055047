"""`trt-pipeline cache ACTION`: the engine store (info, ls, verify, prune, rm); the work is
in cli/cache.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    """`cache` and its actions (info, ls, verify, prune, rm) on the CLI's subparsers."""
    ca = sub.add_parser("cache", help="the engine store: info, ls, verify, prune, rm")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        help="store folder (default: build.store_dir, $TRT_PIPELINE_STORE, or the "
        "user cache folder's trt-pipeline/engines)",
    )
    common.add_argument(
        "--params", default="params.yaml", help="config to read build.store_dir from"
    )
    actions = ca.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in LISTINGS:
        a = actions.add_parser(name, parents=[common], help=text, description=text)
        a.add_argument("--json", action="store_true", help="machine-readable output")
    _add_verify(actions, common)
    _add_removals(actions, common)
    ca.set_defaults(func=run)


LISTINGS = (
    ("info", "where the engine store and calibration cache are, their size and who can read them"),
    ("ls", "key, model, precision, profile, calibration, fallback, GPU, TensorRT, size, last used"),
)


def _add_verify(actions: Subparsers, common: argparse.ArgumentParser) -> None:
    a = actions.add_parser(
        "verify",
        parents=[common],
        help="re-hash every entry; exit 1 if any is damaged",
        description="Re-hash every entry and check its entry.json and manifest; exit 1 if any "
        "is damaged. --repair moves damaged entries to quarantine and removes "
        "unfinished writes and stale lock files.",
    )
    a.add_argument(
        "--repair", action="store_true", help="quarantine damaged entries, remove debris"
    )


def _add_removals(actions: Subparsers, common: argparse.ArgumentParser) -> None:
    dry = "say what would be removed, remove nothing"
    a = actions.add_parser(
        "prune",
        parents=[common],
        help="remove least recently used entries to fit a size",
        description="Remove least recently used entries until the store fits in --max-size.",
    )
    a.add_argument(
        "--max-size", required=True, help="keep at most this much, with a unit: 500M, 2G, 1.5GiB"
    )
    a.add_argument("--dry-run", action="store_true", help=dry)
    a = actions.add_parser(
        "rm", parents=[common], help="remove one entry", description="Remove one entry."
    )
    a.add_argument("key", help="a key or a unique prefix of one, as `cache ls` prints it")
    a.add_argument("--dry-run", action="store_true", help=dry)


def run(args: argparse.Namespace) -> int:
    from pipeline.cli import cache
    from pipeline.core import config
    from pipeline.engine import store
    from pipeline.store import ENGINES

    cfg = config.load(args.params) if args.params and Path(args.params).exists() else None
    where, source = (
        (Path(args.store), "--store")
        if args.store
        else ENGINES.location(cfg.build.store_dir if cfg else None)
    )
    if source == "setting":
        source = f"build.store_dir in {args.params}"
    st = store.EngineStore(where)
    if args.action == "ls":
        return cache.cache_ls(st, args.json)
    if args.action == "info":
        return cache.cache_info_here(st, source, cfg, args.params, args.json)
    if args.action == "verify":
        return cache.cache_verify(st, args.repair)
    if args.action == "prune":
        return cache.cache_prune(st, args.max_size, args.dry_run)
    return cache.cache_rm(st, args.key, args.dry_run)
