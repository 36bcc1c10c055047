"""`trt-pipeline deploy`: the deployment files of a model repository, pinned to the serving
image (pin.serve): a Compose file and Kubernetes manifests (pipeline/serve/deploy.py).
`package` writes them after the repository; this writes them alone, for a repository a CI
job packaged, or before any plan exists (what the fleet will run)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.cli.commands import Subparsers

if TYPE_CHECKING:
    from pipeline.core.config_pin import PinConfig


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "deploy",
        help="write the Compose file and Kubernetes manifests that serve a model repository "
        "from the pinned serving image: a Deployment per GPU kind of pin.fleet",
    )
    p.add_argument("--repository", default="repository", help="the model repository folder")
    p.add_argument("--out", default="deploy", help="where compose.yaml and kubernetes/ go")
    p.add_argument("--params", default="params.yaml")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.core import config

    return written(Path(args.out), Path(args.repository), config.load(args.params).pin)


def written(out: Path, repository: Path, pin: PinConfig) -> int:
    """The deployment files for `repository`, said in a table; `package` ends with this."""
    from pipeline.core import console
    from pipeline.serve import deploy

    files = deploy.write(out, repository, pin)
    if files:
        console.table("deploy", [("files", ", ".join(str(p) for p in files))])
    return 0
