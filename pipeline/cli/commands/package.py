"""`trt-pipeline package`: a Triton model repository of the engines built here
(artifacts/build/, one folder per machine fingerprint): pipeline/serve/repository.py."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.cli.commands import Subparsers
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "package",
        help="write a Triton model repository of the built engines, one plan per compute "
        "capability, checked against the engines and Triton's schema",
    )
    p.add_argument("--out", default="repository", help="the model repository folder")
    p.add_argument("--name", help="the model's name in it (default: model.name of --params)")
    p.add_argument("--params", default="params.yaml")
    p.add_argument(
        "--model",
        action="append",
        help="one model of a project of several (its `models` key, which names it in the "
        "repository); default: every one of them",
    )
    p.add_argument(
        "--from-store",
        action="store_true",
        help="also take every machine's engine of the same graph and settings from the engine "
        "store (build.store_dir, $TRT_PIPELINE_STORE): a team's or a fleet sweep's",
    )
    p.add_argument(
        "--triton-schema",
        type=Path,
        help="a tritonclient wheel (pip download tritonclient --no-deps) to check the config "
        "with Triton's own ModelConfig; default: an installed tritonclient, if any",
    )
    p.add_argument(
        "--deploy",
        default="deploy",
        help="where the deployment files pinned to pin.serve go (compose.yaml, kubernetes/); "
        "written beside the repository, for every model in it",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.core import config
    from pipeline.flow import package_stage

    cfg = config.load(args.params) if Path(args.params).exists() else None
    store_root = None
    if args.from_store:
        from pipeline.store import ENGINES

        store_root, _ = ENGINES.location(cfg.build.store_dir if cfg else None)
    several = args.model or (list(cfg.models) if cfg else [])
    if several:  # each model of several under its key
        if args.name:
            raise PipelineError("package: --name names one model; several are named by their key")
        for model in several:
            one = config.load(args.params, model)  # a model the config does not name: one line
            layout = Layout(model=model)
            package_stage.package(
                layout, model, Path(args.out), store_root, args.triton_schema, one.pin
            )
        return _deployed(args, cfg)
    name = args.name or (cfg.model.name if cfg else None)
    if not name:
        raise PipelineError(f"package: no model name: give --name (or a {args.params})")
    pin = cfg.pin if cfg else None
    package_stage.package(Layout(), name, Path(args.out), store_root, args.triton_schema, pin)
    return _deployed(args, cfg)


def _deployed(args: argparse.Namespace, cfg: PipelineConfig | None) -> int:
    """The deployment files for the whole repository, where a serving image is pinned."""
    from pipeline.cli.commands import deploy

    if cfg is None:
        return 0
    return deploy.written(Path(args.deploy), Path(args.out), cfg.pin)
