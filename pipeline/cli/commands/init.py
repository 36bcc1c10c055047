"""`trt-pipeline init`: set up a git repository for the pipeline; `trt-pipeline add-model`:
one more model in a project of several."""

from __future__ import annotations

import argparse

from pipeline.cli.commands import Subparsers


def add_parser(sub: Subparsers) -> None:
    it = sub.add_parser(
        "init",
        help="set up this git repository for the pipeline (dvc.yaml, conf/, params.yaml); "
        "runs dvc init if needed, nothing else",
    )
    it.add_argument(
        "--model",
        metavar="PATH",
        action="append",
        help="your ONNX model (model=onnx_file with this path); give it again for each model "
        "of a project of several (conf/models/<name>.yaml each, stages per model)",
    )
    it.add_argument(
        "--ci",
        choices=("github", "gitlab"),
        help="write the CI that builds where it will serve: a job per GPU kind of pin.fleet "
        "inside the pinned TensorRT image, then the package (docs/pinned-images.md); in a "
        "repository already set up, only that file, from its params.yaml",
    )
    it.set_defaults(func=run)
    am = sub.add_parser(
        "add-model",
        help="add an ONNX model (conf/models/<name>.yaml); a project of one model becomes "
        "one of several first",
    )
    am.add_argument("path", help="the model's ONNX file")
    am.add_argument("--name", help="its name (default: the file's stem)")
    am.set_defaults(func=add_model)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pipeline.cli.init import ci, project
    from pipeline.core import config

    if not (args.ci and project.RECORD.is_file() and not args.model):
        project.main(args.model)
    if args.ci:
        print(f"wrote {ci.write(args.ci, config.load(Path('params.yaml')).pin)}")
    return 0


def add_model(args: argparse.Namespace) -> int:
    from pipeline.cli.init import project

    for line in project.add_model(args.path, args.name):
        print(line)
    return 0
