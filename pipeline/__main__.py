"""`python -m pipeline <command>`: tools around the pipeline.

    python -m pipeline fingerprint [--json]    this machine's engine fingerprint
    python -m pipeline params [OVERRIDE ...]   write params.yaml from conf/ (what DVC does on exp run -S)
    python -m pipeline cache ls|verify|prune --max-size SIZE|rm KEY    the engine store
    python -m pipeline verify ENGINE           is ENGINE current for the present inputs and this machine?
    python -m pipeline reproduce ENGINE        rebuild ENGINE's inputs and compare the bytes
    python -m pipeline status [--json]         exit 0 when every stage is current here, 1 naming the stale one
    python -m pipeline diff A B [--json] [--fail-on-regression]    compare two builds (or inspect reports)
    python -m pipeline run [HYDRA ARGS]         every stage through Hydra (overrides checked first)
    python -m pipeline exp run [DVC ARGS]       dvc exp run, with its -S overrides checked first

`trt-pipeline` (the console script) is the same CLI.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from pipeline.core import cli
from pipeline.core.errors import PipelineError


def _fingerprint(args: argparse.Namespace) -> int:
    from pipeline.core import config
    from pipeline.machine import fingerprint

    cfg = config.load(args.params) if args.params else config.validate({})
    fp = fingerprint.collect(cfg.build, require_trt=False)
    print(json.dumps(fp, indent=2, sort_keys=True) if args.json else fingerprint.describe(fp))
    return 0


def _params(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from pipeline import overrides
    from pipeline.core import fileio

    raw = overrides.check(list(args.overrides), args.conf)
    OmegaConf.resolve(raw)  # as DVC does: params.yaml holds values, not interpolations
    fileio.write_text(args.out, OmegaConf.to_yaml(raw))
    print(f"wrote {args.out}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from pipeline import cache_cli
    from pipeline.core import config
    from pipeline.engine import store

    store_dir = args.store or (config.load(args.params).build.store_dir if Path(args.params).exists() else None)
    st = store.EngineStore(store.default_root(store_dir))
    if args.action == "ls":
        return cache_cli.cache_ls(st, args.json)
    if args.action == "verify":
        return cache_cli.cache_verify(st)
    if args.action == "prune":
        if not args.max_size:
            raise PipelineError("cache prune needs --max-size, e.g. --max-size 2G")
        return cache_cli.cache_prune(st, args.max_size)
    if not args.key:
        raise PipelineError("cache rm needs a KEY (a prefix from `cache ls` will do)")
    return cache_cli.cache_rm(st, args.key)


def _verify(args: argparse.Namespace) -> int:
    from pipeline import cache_cli

    return cache_cli.verify_engine(args.engine, args.params)


def _reproduce(args: argparse.Namespace) -> int:
    from pipeline import cache_cli

    return cache_cli.reproduce_engine(args.engine, args.params)


def _diff(args: argparse.Namespace) -> int:
    from pipeline.analysis import diff

    from pipeline import resolve

    with resolve.temp_dir() as work:
        a, b = (resolve.diff_source(x, args.store, Path(work)) for x in (args.a, args.b))
        result = diff.compare(diff.load(a), diff.load(b))
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else diff.format_table(result))
    if args.fail_on_regression:
        diff.gate(result)
    return 0


def _status(args: argparse.Namespace) -> int:
    from pipeline import status
    from pipeline.core import config

    cfg = config.load(args.params) if Path(args.params).exists() else config.validate({})
    return status.main(Path("."), args.json, cfg.build)


def _run(args: argparse.Namespace) -> int:
    """Hands the rest of the command line to the Hydra app (pipeline.run), checked first."""
    from pipeline import run

    return run.main_checked(["trt-pipeline run", *args.hydra_args])


def _exp(args: argparse.Namespace) -> int:
    """`dvc exp run` with its -S overrides checked against conf/ and the schema first."""
    import os
    import shutil

    from pipeline import overrides

    sets = [a.split(":", 1)[1] if re.match(r"^[\w./-]+\.yaml:", a) else a
            for flag, a in zip(args.dvc_args, args.dvc_args[1:]) if flag in ("-S", "--set-param")]
    sets += [a.split("=", 1)[1] for a in args.dvc_args if a.startswith("--set-param=")]
    overrides.check(sets, args.conf)
    dvc = shutil.which("dvc")
    argv = [dvc, "exp", "run", *args.dvc_args] if dvc else [sys.executable, "-m", "dvc", "exp", "run", *args.dvc_args]
    os.execv(argv[0], argv)
    return 0  # not reached


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trt-pipeline")
    except PackageNotFoundError:
        return "unknown (not installed)"


def parser(prog: str = "trt-pipeline") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="TensorRT engine pipeline tools")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or stage tables (CI)")
    p.add_argument("-v", "--verbose", action="store_true", help="also show third-party log records")
    sub = p.add_subparsers(dest="command", required=True)
    ru = sub.add_parser("run", help="every stage for one composed config through Hydra (same as python -m pipeline.run)",
                        add_help=False)
    ru.add_argument("hydra_args", nargs=argparse.REMAINDER, help="Hydra overrides and flags, e.g. --multirun a=1,2")
    ru.set_defaults(func=_run)
    ex = sub.add_parser("exp", help="dvc exp run with -S overrides checked first")
    ex.add_argument("action", choices=["run"])
    ex.add_argument("--conf", default="conf")
    ex.add_argument("dvc_args", nargs=argparse.REMAINDER, help="passed to dvc exp run, e.g. -S precision=fp16")
    ex.set_defaults(func=_exp)
    fp = sub.add_parser("fingerprint", help="print this machine's engine fingerprint")
    fp.add_argument("--json", action="store_true")
    fp.add_argument("--params", default="params.yaml", help="config to read build settings from ('' for defaults)")
    fp.set_defaults(func=_fingerprint)
    pa = sub.add_parser("params", help="compose conf/ into params.yaml")
    pa.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. precision=fp16")
    pa.add_argument("--conf", default="conf")
    pa.add_argument("--out", default="params.yaml")
    pa.set_defaults(func=_params)
    ca = sub.add_parser("cache", help="list, verify, prune or remove engine store entries")
    ca.add_argument("action", choices=["ls", "verify", "prune", "rm"])
    ca.add_argument("key", nargs="?")
    ca.add_argument("--max-size", help="prune: keep at most this much (e.g. 500M, 2G), least recently used go first")
    ca.add_argument("--store", help="store folder (default: build.store_dir, $TRT_PIPELINE_STORE, .cache/engines)")
    ca.add_argument("--params", default="params.yaml")
    ca.add_argument("--json", action="store_true")
    ca.set_defaults(func=_cache)
    for name, func, text in (("verify", _verify, "say whether ENGINE is current here, and why not"),
                             ("reproduce", _reproduce, "rebuild ENGINE's inputs and compare bytes")):
        v = sub.add_parser(name, help=text)
        v.add_argument("engine", help="engine.plan or its build folder")
        v.add_argument("--params", default="params.yaml")
        v.set_defaults(func=func)
    st = sub.add_parser("status", help="exit 0 if every stage is current on this machine, 1 naming the stale one")
    st.add_argument("--json", action="store_true")
    st.add_argument("--params", default="params.yaml")
    st.set_defaults(func=_status)
    di = sub.add_parser("diff", help="compare build B with baseline A (build or inspect folders)")
    di.add_argument("a", help="baseline: build or inspect folder, engine-store key (prefix), DVC experiment or git "
                              "revision")
    di.add_argument("b", help="the build to judge, same kinds")
    di.add_argument("--store", help="engine store for keys (default: $TRT_PIPELINE_STORE, .cache/engines)")
    di.add_argument("--json", action="store_true", help="machine-readable output")
    di.add_argument("--fail-on-regression", action="store_true",
                    help="exit 1 when B has a lower fusion ratio or a layer at a wider precision than A")
    di.set_defaults(func=_diff)
    return p


def main(argv: list[str] | None = None) -> int:
    from pipeline.core import console as term

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in ("-sc", "--shell-completion"):
        from pipeline import run

        return run.complete(argv)
    args = parser().parse_args(argv)
    if args.quiet or args.verbose:
        term.set_verbosity(1 if args.verbose else -1)
        term.capture_third_party_logs()
    return args.func(args)


def console() -> None:
    """The `trt-pipeline` console script."""
    cli.run(main)


if __name__ == "__main__":
    cli.run(main)
