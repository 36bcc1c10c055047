"""`trt-pipeline releases`: the NGC release table the pin resolves against (conf/ngc_releases.json,
with its sources and the date it was checked), as a table or JSON."""

from __future__ import annotations

import argparse
import json

from pipeline.cli.commands import Subparsers

COLUMNS = ("release", "TensorRT (-py3)", "Triton", "CUDA", "driver >=", "min CC", "trtllm TensorRT")


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "releases",
        help="list the NGC container releases a pin can name: the TensorRT each image "
        "carries, Triton, CUDA, the least driver and compute capability",
    )
    p.add_argument("--json", action="store_true", help="the rows as JSON")
    p.add_argument("--file", help="a JSON of rows of your own over the shipped table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.core import ngc, tables

    rows = ngc.releases(args.file)
    if args.json:
        print(json.dumps(list(rows.values()), indent=2))
        return 0
    data = json.loads(ngc.TABLE.read_text())
    table = [_row(r) for r in rows.values()]
    print(f"NGC releases, checked {data['checked']} (sources and rules: {ngc.TABLE})")
    print(tables.text(table, headers=list(COLUMNS)))
    return 0


def _row(r: dict[str, object]) -> list[str]:
    trt = r.get("tensorrt") or {}
    assert isinstance(trt, dict)
    both = {v for v in trt.values() if v}
    return [
        str(r["release"]),
        " / ".join(sorted(str(v) for v in both)) or "?",
        str(r.get("triton") or "?"),
        str(r.get("cuda") or "?"),
        str(r.get("driver_min") or "?"),
        str(r.get("min_compute_capability") or "?"),
        str(r.get("trtllm_tensorrt") or "?"),
    ]
