"""`python -m pipeline <command>`: tools around the pipeline.

    python -m pipeline fingerprint [--json]    this machine's engine fingerprint
    python -m pipeline params [OVERRIDE ...]   write params.yaml from conf/ (what DVC does on exp run -S)
    python -m pipeline cache ls|verify|prune --max-size SIZE|rm KEY    the engine store
    python -m pipeline verify ENGINE           is ENGINE current for the present inputs and this machine?
    python -m pipeline reproduce ENGINE        rebuild ENGINE's inputs and compare the bytes
    python -m pipeline status [--json]         exit 0 when every stage is current here, 1 naming the stale one
    python -m pipeline diff A B [--json] [--fail-on-regression]    compare two builds (or inspect reports)
    python -m pipeline sweep-report DIR | --dvc [--out DIR]    one row per sweep job, Markdown, CSV, Pareto picture
"""

from __future__ import annotations

import argparse
import json
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
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pipeline.core import config, fileio

    with initialize_config_dir(config_dir=str(Path(args.conf).resolve()), version_base=None):
        raw = compose("config", overrides=list(args.overrides))
    config.validate(raw)
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

    result = diff.compare(diff.load(args.a), diff.load(args.b))
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else diff.format_table(result))
    if args.fail_on_regression:
        diff.gate(result)
    return 0


def _status(args: argparse.Namespace) -> int:
    from pipeline import status
    from pipeline.core import config

    cfg = config.load(args.params) if Path(args.params).exists() else config.validate({})
    return status.main(Path("."), args.json, cfg.build)


def _sweep_report(args: argparse.Namespace) -> int:
    from pipeline import sweep

    if args.dvc == (args.folder is not None):
        raise PipelineError("sweep-report needs a multirun folder or --dvc, not both")
    if args.dvc:
        rows, out, title = sweep.collect_dvc("."), Path(args.out or "."), "DVC experiments"
    else:
        rows, out, title = sweep.collect(args.folder), Path(args.out or args.folder), Path(args.folder).name
    paths = sweep.write(rows, out, title)
    print(sweep.to_markdown(rows, title))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline", description="TensorRT engine pipeline tools")
    sub = p.add_subparsers(dest="command", required=True)
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
    di.add_argument("a", help="baseline: build folder (manifest.json) or inspect folder (report.json)")
    di.add_argument("b", help="the build to judge, same kinds")
    di.add_argument("--json", action="store_true", help="machine-readable output")
    di.add_argument("--fail-on-regression", action="store_true",
                    help="exit 1 when B has a lower fusion ratio or a layer at a wider precision than A")
    di.set_defaults(func=_diff)
    sw = sub.add_parser("sweep-report", help="summarise a Hydra multirun folder (or DVC experiments with --dvc)")
    sw.add_argument("folder", nargs="?", help="a multirun folder (hydra.sweep.dir)")
    sw.add_argument("--dvc", action="store_true", help="summarise `dvc exp show --json` in this repository")
    sw.add_argument("--out", help="where to write sweep_summary.{md,csv} and sweep_pareto.{svg,png}")
    sw.set_defaults(func=_sweep_report)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    cli.run(main)
