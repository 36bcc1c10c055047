"""Quality gates on a finished build (config build.gates): `evaluate` is pure and
returns every gate's result for metrics/gates.json; `enforce` turns the first
failure into one PipelineError line naming the gate, its threshold and what broke it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.analysis import buildlog
from pipeline.analysis.buildlog import BuildLogSummary
from pipeline.core import config, gate, metrics_files
from pipeline.core.errors import PipelineError
from pipeline.core.gate import GateResult
from pipeline.core.metrics_files import GatesMetrics
from pipeline.core.numbers import MIB, plain

if TYPE_CHECKING:
    from pipeline.records.build_file import Manifest

GATES = (
    "max_warnings",
    "forbid_patterns",
    "min_fusion_ratio",
    "max_engine_mib",
    "max_peak_memory_mib",
)
SHOWN_MATCHES = 2


def _compile(patterns: Iterable[str]) -> list[re.Pattern[str]]:
    return buildlog.compile_patterns(patterns, "build.gates.forbid_patterns")


def _forbidden(patterns: list[str], records: Iterable[buildlog.Record] | str) -> GateResult:
    compiled = _compile(patterns)
    lines: list[str] = []
    if compiled:
        if isinstance(records, str):  # a saved build.log (an engine taken from the store)
            records = buildlog.parse_log(records)
        lines = buildlog.log_lines(records)
    hits = [(p.pattern, line) for p in compiled for line in lines if p.search(line)]
    first = hits[0][0] if hits else None
    detail = (
        f"pattern {first!r} matched {sum(1 for p, _ in hits if p == first)} build-log line(s)"
        if hits
        else f"none of {len(compiled)} pattern(s) matched"
    )
    shown = [{"pattern": p, "line": line} for p, line in hits[:SHOWN_MATCHES]]
    return gate.result(
        "forbid_patterns",
        len(hits),
        list(patterns),
        passed=not hits,
        subject="build",
        detail=detail,
        matches=shown,
    )


def evaluate(
    gates_cfg: config.GatesConfig | None,
    summary: BuildLogSummary,
    records: Iterable[buildlog.Record] | str,
    engine: bytes | None = None,
    manifest: Manifest | None = None,
) -> list[GateResult]:
    """Every gate, switched on or not (a switched-off gate passes and still reports its
    value, so metrics show the trend before anyone sets a threshold). `records` may be
    the build.log text; without `engine`, the manifest's engine size is used. Pass or fail
    is decided in one place, pipeline/core/gate.py, from each value's direction."""
    g = {
        k: plain(v) for k, v in (config.to_dict(gates_cfg) if gates_cfg is not None else {}).items()
    }
    unknown = sorted(set(g) - set(GATES))
    if unknown:
        raise PipelineError(
            f"build.gates: unknown gate {unknown[0]}; expected one of {', '.join(GATES)}"
        )
    engine_bytes = (
        len(engine) if engine is not None else manifest["engine"]["bytes"] if manifest else None
    )
    mib = round(engine_bytes / MIB, 3) if engine_bytes is not None else None
    warnings = len(summary.get("warnings", []))
    peak = summary.get("peak_memory_mib")
    return [
        _measured("max_warnings", warnings, g.get("max_warnings"), "max", f"{warnings} warning(s)"),
        _forbidden(list(g.get("forbid_patterns") or []), records),
        _measured(
            "min_fusion_ratio", summary.get("fusion_ratio"), g.get("min_fusion_ratio"), "min",
            _fusion(summary),
        ),
        _measured("max_engine_mib", mib, g.get("max_engine_mib"), "max", f"engine {mib} MiB"),
        _measured("max_peak_memory_mib", peak, g.get("max_peak_memory_mib"), "max",
                  f"peak memory {peak} MiB"),
    ]  # fmt: skip


# How a gate's detail names its threshold, by direction.
BOUND = {"max": "at most", "min": "at least"}
UNIT = {"max_engine_mib": " MiB", "max_peak_memory_mib": " MiB"}


def _measured(
    name: str, value: float | None, threshold: float | None, direction: str, measured: str
) -> GateResult:
    """A gate on one measured value; the threshold's words end its detail when it is set."""
    if threshold is not None:
        allowed = "required" if direction == "min" else "allowed"
        measured += f", {BOUND[direction]} {threshold}{UNIT.get(name, '')} {allowed}"
    return gate.result(
        name, value, threshold, direction=direction, subject="build", detail=measured
    )


def _fusion(summary: BuildLogSummary) -> str:
    ratio = summary.get("fusion_ratio")
    if ratio is None:
        return f"fusion ratio {summary.get('fusion_basis') or 'unknown'}"
    return (
        f"fusion ratio {ratio} ({summary.get('layers_original')} ONNX compute nodes → "
        f"{summary.get('layers_final')} engine layers)"
    )


failures = gate.failures


def message(result: GateResult) -> str:
    text = (
        f"build gate {result['gate']} failed (threshold {result['threshold']}): {result['detail']}"
    )
    for m in result.get("matches", []):
        text += f"; {m['line']!r}"
    return " ".join(text.split())


def enforce(results: list[GateResult]) -> None:
    failed = failures(results)
    if failed:
        more = (
            f" (+{len(failed) - 1} more failed gate(s), see metrics/gates.json)"
            if len(failed) > 1
            else ""
        )
        raise PipelineError(message(failed[0]) + more)


def metrics(results: list[GateResult]) -> GatesMetrics:
    """metrics/gates.json: numbers DVC can show and compare, plus what matched."""
    return {
        "passed": not failures(results),
        "failed": len(failures(results)),
        "gates": {r["gate"]: {k: v for k, v in r.items() if k != "gate"} for r in results},
    }


def write_metrics(path: str | Path, results: list[GateResult]) -> Path:
    return metrics_files.write_gates(Path(path), metrics(results))


def check(
    gates_cfg: config.GatesConfig | None,
    summary: BuildLogSummary,
    records: Iterable[buildlog.Record] | str,
    engine: bytes | None = None,
    manifest: Manifest | None = None,
    metrics_path: str | Path | None = None,
) -> list[GateResult]:
    """Evaluate, record the results (when metrics_path is given), then fail on the first
    broken gate, so a failed build still leaves the reason in metrics/gates.json."""
    records = records if isinstance(records, str) else list(records)
    results = evaluate(gates_cfg, summary, records, engine, manifest)
    if metrics_path is not None:
        write_metrics(metrics_path, results)
    enforce(results)
    return results
