"""One shape for every gate result, whoever judges: the accuracy gate (per output and
metric), the build gates (per build) and the regression gate of `diff`. Each result
says what was judged, its value, the threshold, the direction, and whether it passed;
metrics files keep every result, pass or fail, and a failure becomes one line that
names every failing gate."""

# No `from __future__ import annotations`: a TypedDict needs its Required[] evaluated at class
# creation for __required_keys__, which the record reader checks.

from collections.abc import Iterable
from typing import Any, Required, TypedDict

from pipeline.core.errors import PipelineError
from pipeline.core.numbers import exact, plain

# Which way each accuracy figure must stay: "max" where it must not exceed its threshold (an
# error), "min" where it must not fall below it (an agreement); so also which is the worse of
# two figures.
ACCURACY_DIRECTION = {
    "max_abs_error": "max",
    "mean_rel_error": "max",
    "rel_error": "max",
    "cosine": "min",
    "top1_agreement": "min",
    "perplexity_increase": "max",
}


class GateResult(TypedDict, total=False):
    """One gate's verdict, as metrics files keep it (JSON: a TypedDict, not a class)."""

    gate: Required[str]
    subject: Required[str | None]  # what was judged: an output, "build"
    value: Required[Any]
    threshold: Required[Any]  # None or []: the gate is switched off
    direction: Required[str]  # "max", "min" or "none" (judged by `passed`)
    enabled: Required[bool]
    passed: Required[bool]
    detail: Required[str]
    metric: str  # the accuracy gate: the metric judged, its task and the setting's key
    task: str
    setting: str
    matches: list[dict[str, str]]  # forbid_patterns: the log lines that matched


def result(
    gate: str,
    value: Any,
    threshold: Any,
    *,
    passed: bool | None = None,
    direction: str = "none",
    subject: str | None = None,
    detail: str = "",
    metric: str | None = None,
    task: str | None = None,
    setting: str | None = None,
    matches: list[dict[str, str]] | None = None,
) -> GateResult:
    """direction "max": value must be <= threshold; "min": >= threshold; "none": judged
    by `passed`. A gate with no threshold (None or []) is switched off: it passes and
    still reports its value, so the trend is visible before anyone sets a limit."""
    enabled = threshold not in (None, [])
    if passed is None:
        if not enabled:
            passed = True
        elif direction == "max":
            passed = value is not None and value <= threshold
        elif direction == "min":
            passed = value is not None and value >= threshold
        else:
            raise ValueError(f"gate {gate}: give `passed` or a direction")
    out = GateResult(
        gate=gate,
        subject=subject,
        value=value,
        threshold=plain(threshold),
        direction=direction,
        enabled=enabled,
        passed=bool(passed),
        detail=detail,
    )
    if metric is not None:
        out["metric"] = metric
    if task is not None:
        out["task"] = task
    if setting is not None:
        out["setting"] = setting
    if matches is not None:
        out["matches"] = matches
    return out


def failures(results: Iterable[GateResult]) -> list[GateResult]:
    return [r for r in results if not r["passed"]]


def describe(r: GateResult) -> str:
    """'cosine of output logits is 0.91, needs >= 0.999' or the gate's own detail."""
    if r["direction"] in ("max", "min") and r.get("metric"):
        op = "<=" if r["direction"] == "max" else ">="
        of = f" of output '{r['subject']}'" if r.get("subject") else ""
        if r.get("task") and r["task"] != "metric":
            of += f" ({r['task']})"
        by = f" ({r['setting']})" if r.get("setting") else ""
        return f"{r['metric']}{of} is {exact(r['value'])}, needs {op} {exact(r['threshold'])}{by}"
    return f"{r['gate']} (threshold {r['threshold']}): {r['detail']}"


# Failing gates a line names; the rest are counted (every one is in the metrics file): a
# decoder's dozens of outputs made a line no one reads to the end.
LISTED_FAILURES = 3


def failure_line(label: str, results: Iterable[GateResult]) -> str | None:
    """'<label>: <the first failing gates>[; and N more]', or None when all passed."""
    failed = failures(results)
    if not failed:
        return None
    said = "; ".join(describe(r) for r in failed[:LISTED_FAILURES])
    if len(failed) > LISTED_FAILURES:
        said += (
            f"; and {len(failed) - LISTED_FAILURES} more failing (every one in the metrics file)"
        )
    return " ".join(f"{label}: {said}".split())


def enforce(label: str, results: Iterable[GateResult]) -> None:
    line = failure_line(label, list(results))
    if line:
        raise PipelineError(line)
