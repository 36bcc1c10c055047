"""Compare outputs with the fp32 reference: the figures behind the accuracy gate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, cast

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.core.gate import ACCURACY_DIRECTION, GateResult, failure_line, failures, result
from pipeline.inputs.reference_file import Pair
from pipeline.precision.gate import output_figures, tasks
from pipeline.precision.gate.tasks import OutputTasks, UserMetric

if TYPE_CHECKING:
    from pipeline.core.config import AccuracyGate, ModelConfig, PrecisionConfig

# A reference batch: (inputs, fp32 outputs), arrays by name (the reference file's Pair).
ReferenceBatch = Pair


class GateFailed(PipelineError):
    """The accuracy gate's one line, with the whole summary behind it (the calibration
    summary as far as it got: judged, not written), so the caller can write every metric
    before the error stops the run."""

    def __init__(self, line: str, summary: Mapping[str, Any]) -> None:
        super().__init__(line)
        self.summary = summary


# Gate thresholds on how far values moved, which random reference inputs cannot judge.
MAGNITUDE_GATES = ("max_abs_error", "max_mean_rel_error", "max_rel_error")


class CriteriaKey(TypedDict):
    """What a cache of judgements is keyed by besides the gate's thresholds (Criteria.key):
    the optional keys are absent where unset, so older caches keep their keys."""

    task: str  # the default task
    output_tasks: NotRequired[dict[str, str]]  # output -> its task, sorted by output
    metric: NotRequired[str]  # the user's metric's name
    metric_source_sha256: NotRequired[str]  # and its module's bytes


@dataclass(frozen=True)
class Criteria:
    """What the accuracy gate judges by: the thresholds (precision.gate), each output's task
    (model.task, model.output_tasks) and the user's metric (precision.gate.metric)."""

    gate: AccuracyGate
    tasks: OutputTasks
    metric: UserMetric | None = None

    @classmethod
    def of(
        cls, precision_cfg: PrecisionConfig, model_cfg: ModelConfig, on_random: bool = False
    ) -> Criteria:
        """`on_random`: the reference inputs were drawn at random; the gate then leaves out
        its thresholds on how far values moved (MAGNITUDE_GATES) and keeps those on their
        direction (cosine, top-1, the user's metric): random inputs say whether a graph
        computes the same thing, not how precisely it does on real data (the PP-OCRv4
        detector in fp16: rel_error 0.076 on random inputs, 0.009 on printed pages)."""
        gate = precision_cfg.gate
        if on_random:
            from omegaconf import OmegaConf

            # merge() gives a DictConfig of the same schema: still an AccuracyGate to readers
            gate = cast("AccuracyGate", OmegaConf.merge(gate, dict.fromkeys(MAGNITUDE_GATES)))
        return cls(
            gate,
            OutputTasks.of(model_cfg),
            tasks.user_metric(precision_cfg.gate, getattr(model_cfg, "source", None)),
        )

    def judge(
        self, reference: list[dict[str, np.ndarray]], candidate: list[dict[str, np.ndarray]]
    ) -> tuple[dict[str, dict[str, Any]], list[GateResult]]:
        """(figures, gate results) of `candidate` against the fp32 `reference` outputs."""
        figures = compare(reference, candidate, self.tasks, self.metric)
        return figures, check_gate(figures, self.gate)

    def key(self) -> CriteriaKey:
        """What a cache of judgements must be keyed by besides the gate's thresholds (the
        default task alone, as before output tasks and metrics existed, where they are unset)."""
        out: CriteriaKey = {"task": self.tasks.default}
        if self.tasks.per_output:
            out["output_tasks"] = dict(sorted(self.tasks.per_output.items()))
        if self.metric is not None:
            out["metric"] = self.metric.name
            out["metric_source_sha256"] = self.metric.source_sha256
        return out


def compare(
    reference: list[dict[str, np.ndarray]],
    candidate: list[dict[str, np.ndarray]],
    task: str | OutputTasks,
    metric: UserMetric | None = None,
) -> dict[str, dict[str, Any]]:
    """Per output, each over all batches together: max absolute error, mean relative
    error, cosine similarity, the worst sample's relative error, and what the output's task
    adds (pipeline/precision/gate/tasks.py): top-1 agreement along the class axis for class
    scores; the worst last-axis vector's cosine (`cosine`, with `cosine_mean`) for
    embeddings and sequences. Each output records its task and the gate keys that judge it.
    Labels (`label:<name>` beside the fp32 outputs) go to the user's `metric` only."""
    output_tasks = task if isinstance(task, OutputTasks) else OutputTasks(task)
    split = [tasks.split_labels(b) for b in reference]
    reference = [outputs for outputs, _ in split]
    figures: dict[str, dict[str, Any]] = {}
    phases = [tasks.decoder_phase(b) for b in reference]
    for name in reference[0]:
        first = np.asarray(reference[0][name])
        kind = output_tasks.task(name, first)
        last = first.shape[-1] if first.ndim >= 2 else 1
        figures[name] = {
            **output_figures.over_batches(
                name, _of(name, reference), _of(name, candidate), kind, last
            ),
            "task": kind,
        }
        if kind == "next_token" and len(set(phases)) > 1:
            figures[name].update(_by_phase(name, reference, candidate, phases, last))
        if kind == "next_token":
            figures[name].update(tasks.perplexity(name, reference, candidate, split))
    if metric is not None:
        labels = [lb for _, lb in split]
        value = metric(reference, candidate, labels if any(labels) else None)
        figures[metric.name] = {
            "metric": value,
            "finite": bool(np.isfinite(value)),
            "task": "metric",
        }
    return figures


def _of(name: str, batches: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    return [b[name] for b in batches]


class PhaseFigures(TypedDict, total=False):
    """One phase's figures of a decoder's logits (those its rows gave)."""

    top1_agreement: float
    cosine: float
    rows: int


class ByPhase(TypedDict, total=False):
    """What a decoder's logits add to their figures: the worse phase's top-1 and cosine (where
    every phase has them), and each phase's figures."""

    top1_agreement: float
    cosine: float
    by_phase: dict[str, PhaseFigures]  # "prefill", "decode" -> its figures


_PHASE_FIGURES: tuple[Literal["top1_agreement", "cosine", "rows"], ...] = (
    "top1_agreement",
    "cosine",
    "rows",
)
_WORST_OF_PHASES: tuple[Literal["top1_agreement", "cosine"], ...] = ("top1_agreement", "cosine")


def _by_phase(
    name: str,
    reference: list[dict[str, np.ndarray]],
    candidate: list[dict[str, np.ndarray]],
    phases: list[str | None],
    last: int,
) -> ByPhase:
    """A decoder's logits judged per phase (prefill positions, decode steps): the gate takes
    the worse phase's top-1 and cosine, so a few decode steps are not lost among many
    prompt positions; `by_phase` keeps both."""
    figures: dict[str, PhaseFigures] = {}
    for phase in sorted({p for p in phases if p is not None}):
        keep = [i for i, p in enumerate(phases) if p == phase]
        whole = output_figures.over_batches(
            name,
            [reference[i][name] for i in keep],
            [candidate[i][name] for i in keep],
            "next_token",
            last,
        )
        figures[phase] = {}
        for k in _PHASE_FIGURES:
            if k in whole:
                figures[phase][k] = whole[k]
    worst: ByPhase = {}
    for w in _WORST_OF_PHASES:
        if all(w in f for f in figures.values()):
            worst[w] = min(f[w] for f in figures.values())
    return {**worst, "by_phase": figures}


GATE_CHECKS = (
    # (config key, metric, direction): "max" means the metric must not exceed the threshold
    *(
        (key, metric, ACCURACY_DIRECTION[metric])
        for key, metric in (
            ("max_abs_error", "max_abs_error"),
            ("max_mean_rel_error", "mean_rel_error"),
            ("max_rel_error", "rel_error"),
            ("min_cosine", "cosine"),
            ("min_top1_agreement", "top1_agreement"),
            ("max_perplexity_increase", "perplexity_increase"),
        )
    ),
    ("metric_max", "metric", "max"),
    ("metric_min", "metric", "min"),
)
# The user's metric is judged whatever the outputs' tasks.
JUDGED = {**tasks.JUDGED, "metric": ("metric_max", "metric_min")}


def check_gate(figures: dict[str, dict[str, Any]], gate: AccuracyGate) -> list[GateResult]:
    """Each configured threshold against each output, in the one gate shape
    (pipeline.core.gate); every result is kept, pass or fail."""
    results: list[GateResult] = []
    for output, metrics in figures.items():
        if not metrics.get("finite", True):
            results.append(
                result(
                    "finite",
                    False,
                    True,
                    passed=False,
                    subject=output,
                    metric="finite",
                    detail=f"output '{output}' has NaN or inf",
                )
            )
        task = metrics.get("task", "classification")
        for key, metric, direction in GATE_CHECKS:
            threshold = gate.get(key) if hasattr(gate, "get") else getattr(gate, key, None)
            if threshold is None or metric not in metrics or key not in JUDGED[task]:
                continue
            results.append(
                result(
                    key,
                    metrics[metric],
                    float(threshold),
                    direction=direction,
                    subject=output,
                    metric=metric,
                    setting=f"precision.gate.{key}",
                    task=task,
                )
            )
    return results


def passed(results: list[GateResult]) -> bool:
    return not failures(results)


# Said wherever a gate judged on random reference inputs is reported (gate lines, stage
# tables, reports, sweep summaries): a healthy graph can fail on them, a broken one pass.
ON_RANDOM = "on RANDOM inputs (no model.reference_data)"


def judged_on_random(summary: Mapping[str, Any]) -> bool:
    """Whether a calibrate summary's gate was judged on random reference inputs."""
    return bool((summary.get("reference") or {}).get("random"))


def raise_on_failure(
    results: list[GateResult], label: str, summary: Mapping[str, Any], hint: str = ""
) -> None:
    """One line naming every failing metric, its value and its threshold (and that the
    inputs were random, where they were, and `hint`: what the failure means); the
    exception carries `summary` for the metrics file."""
    where = f" {ON_RANDOM}" if judged_on_random(summary) else ""
    line = failure_line(f"accuracy gate failed for {label}{where}", results)
    if line:
        if where:
            line += "; give real inputs with model.reference_data before trusting this gate"
        raise GateFailed(line + hint, summary)
