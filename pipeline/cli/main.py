"""`python -m pipeline <command>` (the `trt-pipeline` console script): tools around the
pipeline. Each subcommand's parser is added by its own function; `trt-pipeline --help` and
the generated reference (docs/reference/cli.md) list them, so nothing here repeats them."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from pipeline.core import cli
from pipeline.core.errors import PipelineError
from pipeline.core.stages import STAGES


def _fingerprint(args: argparse.Namespace) -> int:
    from pipeline.core import config
    from pipeline.machine import fingerprint

    cfg = config.load(args.params) if args.params else config.validate({})
    fp = fingerprint.collect(cfg.build, require_trt=False)
    print(json.dumps(fp, indent=2, sort_keys=True) if args.json else fingerprint.describe(fp))
    return 0


def _params(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from pipeline.cli import overrides
    from pipeline.core import fileio

    raw = overrides.check(list(args.overrides), args.conf)
    OmegaConf.resolve(raw)  # as DVC does: params.yaml holds values, not interpolations
    fileio.write_text(args.out, OmegaConf.to_yaml(raw))
    print(f"wrote {args.out}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from pipeline.cli import cache as cache_cmd
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
        return cache_cmd.cache_ls(st, args.json)
    if args.action == "info":
        return cache_cmd.cache_info_here(st, source, cfg, args.params, args.json)
    if args.action == "verify":
        return cache_cmd.cache_verify(st, args.repair)
    if args.action == "prune":
        return cache_cmd.cache_prune(st, args.max_size, args.dry_run)
    return cache_cmd.cache_rm(st, args.key, args.dry_run)


def _verify(args: argparse.Namespace) -> int:
    from pipeline.cli import engine_check

    return engine_check.verify_engine(args.engine, args.params)


def _reproduce(args: argparse.Namespace) -> int:
    from pipeline.cli import engine_check

    return engine_check.reproduce_engine(args.engine, args.params)


def _diff(args: argparse.Namespace) -> int:
    from pipeline.analysis import diff
    from pipeline.cli import diff_targets

    with diff_targets.temp_dir() as work:
        a, b = (diff_targets.diff_source(x, args.store, Path(work)) for x in (args.a, args.b))
        result = diff.compare(diff.load(a), diff.load(b))
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else diff.format_table(result))
    if args.fail_on_regression:
        diff.gate(result)
    return 0


def _status(args: argparse.Namespace) -> int:
    from pipeline.cli import status
    from pipeline.core import config

    cfg = config.load(args.params) if Path(args.params).exists() else config.validate({})
    return status.main(Path("."), args.json, cfg.build)


def _sweep_report(args: argparse.Namespace) -> int:
    from pipeline.sweeps import summary

    if args.dvc == (args.folder is not None):
        raise PipelineError("sweep-report needs a multirun folder or --dvc, not both")
    if args.dvc:
        rows, out, title = summary.collect_dvc("."), Path(args.out or "."), "DVC experiments"
    else:
        rows, out, title = (
            summary.collect(args.folder),
            Path(args.out or args.folder),
            Path(args.folder).name,
        )
    paths = summary.write(rows, out, title)
    print(summary.to_markdown(rows, title))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _run(args: argparse.Namespace) -> int:
    """Hands the rest of the command line to the Hydra app (pipeline.cli.run), checked first."""
    from pipeline.cli import run

    return run.main_checked(["trt-pipeline run", *args.hydra_args])


def _init(args: argparse.Namespace) -> int:
    from pipeline.cli import init

    return init.main(args.model)


def _stage(args: argparse.Namespace) -> int:
    from pipeline.cli import stage

    return stage.run(args.name, args.params)


def _exp(args: argparse.Namespace) -> int:
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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trt-pipeline")
    except PackageNotFoundError:
        return "unknown (not installed)"


def parser(prog: str = "trt-pipeline") -> argparse.ArgumentParser:
    """The command line: each subcommand adds its own parser below (the cache command's is
    in cli/cache.py, beside its code); `--help` of each is the reference."""
    p = argparse.ArgumentParser(prog=prog, description="TensorRT engine pipeline tools")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bars or stage tables (CI)"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="also show third-party log records")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_add_run, _add_exp, _add_init, _add_stage, _add_fingerprint, _add_params):
        add(sub)
    from pipeline.cli import cache as cache_cmd

    cache_cmd.add_parser(sub).set_defaults(func=_cache)
    for add in (_add_verify_and_reproduce, _add_status, _add_diff, _add_sweep_report):
        add(sub)
    return p


Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_run(sub: Subparsers) -> None:
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
    ru.set_defaults(func=_run)


def _add_exp(sub: Subparsers) -> None:
    ex = sub.add_parser("exp", help="dvc exp run with -S overrides checked first")
    ex.add_argument("action", choices=["run"])
    ex.add_argument("--conf", default="conf")
    ex.add_argument(
        "dvc_args", nargs=argparse.REMAINDER, help="passed to dvc exp run, e.g. -S precision=fp16"
    )
    ex.set_defaults(func=_exp)


def _add_init(sub: Subparsers) -> None:
    it = sub.add_parser(
        "init",
        help="set up this git repository for the pipeline (dvc.yaml, conf/, params.yaml); "
        "runs dvc init if needed, nothing else",
    )
    it.add_argument(
        "--model", metavar="PATH", help="your ONNX model (model=onnx_file with this path)"
    )
    it.set_defaults(func=_init)


def _add_stage(sub: Subparsers) -> None:
    sg = sub.add_parser("stage", help="run one DVC stage, as the dvc.yaml init writes calls it")
    sg.add_argument("name", choices=STAGES)
    sg.add_argument("--params", default="params.yaml")
    sg.set_defaults(func=_stage)


def _add_fingerprint(sub: Subparsers) -> None:
    fp = sub.add_parser("fingerprint", help="print this machine's engine fingerprint")
    fp.add_argument("--json", action="store_true")
    fp.add_argument(
        "--params",
        default="params.yaml",
        help="config to read build settings from ('' for defaults)",
    )
    fp.set_defaults(func=_fingerprint)


def _add_params(sub: Subparsers) -> None:
    pa = sub.add_parser("params", help="compose conf/ into params.yaml")
    pa.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. precision=fp16")
    pa.add_argument("--conf", default="conf")
    pa.add_argument("--out", default="params.yaml")
    pa.set_defaults(func=_params)


def _add_verify_and_reproduce(sub: Subparsers) -> None:
    for name, func, text in (
        ("verify", _verify, "say whether ENGINE is current here, and why not"),
        ("reproduce", _reproduce, "rebuild ENGINE's inputs and compare bytes"),
    ):
        v = sub.add_parser(name, help=text)
        v.add_argument("engine", help="engine.plan or its build folder")
        v.add_argument("--params", default="params.yaml")
        v.set_defaults(func=func)


def _add_status(sub: Subparsers) -> None:
    st = sub.add_parser(
        "status", help="exit 0 if every stage is current on this machine, 1 naming the stale one"
    )
    st.add_argument("--json", action="store_true")
    st.add_argument("--params", default="params.yaml")
    st.set_defaults(func=_status)


def _add_diff(sub: Subparsers) -> None:
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
    di.set_defaults(func=_diff)


def _add_sweep_report(sub: Subparsers) -> None:
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
    sw.set_defaults(func=_sweep_report)


def main(argv: list[str] | None = None) -> int:
    from pipeline.core import console as term

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in ("-sc", "--shell-completion"):
        from pipeline.cli import run

        return run.complete(argv)
    at = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if at is not None and argv[at] == "run":
        # Hydra's arguments pass as they are: argparse's REMAINDER refuses a leading flag
        # (`run --multirun a=1,2`: "unrecognized arguments").
        args = parser().parse_args([*argv[:at], "run"])
        args.hydra_args = argv[at + 1 :]
    else:
        args = parser().parse_args(argv)
    if args.quiet or args.verbose:
        term.set_verbosity(1 if args.verbose else -1)
        term.capture_third_party_logs()
    func: Callable[[argparse.Namespace], int] = args.func  # each parser's set_defaults
    return func(args)


def console() -> None:
    """The `trt-pipeline` console script."""
    cli.run(main)


if __name__ == "__main__":
    cli.run(main)
