"""`trt-pipeline package`: a Triton model repository of the engines built here
(artifacts/build/, one folder per machine fingerprint): pipeline/serve/repository.py."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.cli.commands import Subparsers
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout

if TYPE_CHECKING:
    import numpy as np


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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.core import config, console
    from pipeline.serve import repository

    cfg = config.load(args.params) if Path(args.params).exists() else None
    name = args.name or (cfg.model.name if cfg else None)
    if not name or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name in (".", ".."):
        raise PipelineError(
            f"package: {name!r} is not a Triton model name (letters, digits, _ . -); give --name"
        )
    engines = repository.engines_in(Layout().build_dir)
    if args.from_store:
        from pipeline.store import ENGINES

        root, _ = ENGINES.location(cfg.build.store_dir if cfg else None)
        engines = repository.with_store(engines, root)
    done = repository.write(
        Path(args.out), name, engines, args.triton_schema, _reference_sample(Layout())
    )
    batch = repository.max_batch(engines)
    console.table(
        f"package: {name}",
        [
            ("repository", str(Path(args.out) / name)),
            ("GPU kinds", ", ".join(sorted({e.gpu or "no GPU (portable)" for e in engines}))),
            *[(f"sm {cc}", plan) for cc, plan in done["plans"].items()],
            ("max_batch_size", str(batch) if batch else "0 (no batch dim: full dims)"),
            *[("checked", line) for line in done["checked"]],
        ],
    )
    return 0


def _reference_sample(layout: Layout) -> dict[str, np.ndarray] | None:
    """The export's first reference batch of inputs, for model_warmup; None without one."""
    from pipeline.inputs import reference_file

    if not layout.reference.is_file():
        return None
    return dict(reference_file.read(layout.reference)[0][0])
