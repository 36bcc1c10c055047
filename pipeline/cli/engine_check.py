"""`trt-pipeline verify ENGINE` and `trt-pipeline reproduce ENGINE`: is an engine current
for the present inputs and this machine, and does rebuilding its inputs give its bytes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core.errors import PipelineError

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.core.layout import Layout
    from pipeline.records.fingerprint_file import FingerprintRecord


def _current_context(params: str) -> tuple[PipelineConfig, Layout, FingerprintRecord]:
    from pipeline.core import config
    from pipeline.core.layout import Layout
    from pipeline.machine import fingerprint

    cfg = config.load(params)
    return cfg, Layout(Path(".")), fingerprint.collect(cfg.build)


def verify_engine(path: str, params: str) -> int:
    from pipeline.engine import verify
    from pipeline.flow import upstream

    folder = verify.engine_folder(path)
    cfg, layout, fp = _current_context(params)
    reasons = upstream.chain_reasons(cfg, layout) + verify.reasons_not_current(
        folder, cfg, layout, fp
    )
    if reasons:
        for r in reasons:
            print(f"  - {r}")
        raise PipelineError(
            f"{folder} is not current for the present inputs and this machine "
            f"({len(reasons)} reason{'s' * (len(reasons) > 1)} above)"
        )
    print(f"{folder}: current for the present inputs and this machine ({fp['id']})")
    return 0


def reproduce_engine(path: str, params: str) -> int:
    """Rebuild from the present inputs (bypassing the store) and compare bytes."""
    from pipeline.engine import build, verify

    folder = verify.engine_folder(path)
    cfg, layout, fp = _current_context(params)
    reasons = verify.reasons_not_current(folder, cfg, layout, fp)
    if reasons:
        raise PipelineError(
            f"{folder} is not current ({reasons[0]}); reproduce compares like with like only"
        )
    onnx_path = layout.calibrated_graph
    resolved = build.resolve_profiles(cfg.profile, onnx_path)
    # The timing cache only read: a reproduction leaves the machine's cache as it found it.
    timing = "read" if cfg.build.timing_cache != "off" else "off"
    result, _ = build.build_as_configured(cfg, fp, onnx_path, resolved, sys.stderr.isatty(), timing)
    report = verify.compare_bytes((folder / "engine.plan").read_bytes(), result.engine)
    if report["identical"]:
        print(f"identical: the rebuild gives the same {report['bytes']:,} bytes")
        return 0
    print(
        f"differs: sizes {report['sizes'][0]:,} vs {report['sizes'][1]:,} bytes, "
        f"{report['differing_bytes']:,} bytes differ, first at offset {report['first_difference']:,}"
    )
    for run in report["runs"]:
        print(
            f"  @{run['offset']:>9,} ({run['length']} bytes)\n      stored : {run['a']}\n      rebuilt: {run['b']}"
        )
    if report["more_runs"]:
        print(f"  … {report['more_runs']} more differing runs")
    return 2
