"""What each output is, and so what the accuracy gate judges on it.

Top-1 agreement means something for class scores only; boxes and maps want the relative
error of each sample; sequences (a CTC matrix, per-step features) and recurrent states want
the cosine of each step's vector. model.task names the kind of every output,
model.output_tasks one output's; `auto` takes class scores for [N, C] outputs, a value per
sample for rank 0 and 1, and a dense map otherwise.

A task metric of the user's (precision.gate.metric: `mypkg.metrics:cer`) is called with the
fp32 and the candidate outputs, batch by batch, and the labels from the reference folder
(arrays keyed `label:<name>`, None where there are none), and returns one number that
precision.gate.metric_max / metric_min judge, in the gate and the fallback search alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from pipeline.core import hashing
from pipeline.core.errors import PipelineError, first_line
from pipeline.core.kv_cache import is_cache
from pipeline.inputs.array_folder import LABEL_PREFIX, NEXT_TOKENS

if TYPE_CHECKING:
    from pipeline.core.config import AccuracyGate, ModelConfig

# The gate keys each task is judged by (the others are reported, not judged): absolute
# error means nothing for boxes in pixels, top-1 nothing for a map.
JUDGED: dict[str, tuple[str, ...]] = {
    "classification": ("max_abs_error", "max_mean_rel_error", "min_cosine", "min_top1_agreement"),
    "embedding": ("max_abs_error", "max_mean_rel_error", "min_cosine"),
    "regression": ("max_rel_error", "max_mean_rel_error", "min_cosine"),
    "detection": ("max_rel_error", "max_mean_rel_error", "min_cosine"),
    "dense": ("max_rel_error", "max_mean_rel_error", "min_cosine"),
    "sequence": ("max_rel_error", "max_mean_rel_error", "min_cosine"),
    # a decoder's logits: the next token each position picks, and each position's cosine
    "next_token": ("min_cosine", "min_top1_agreement", "max_perplexity_increase"),
    # a decoder's KV cache: its error reaches the next step's logits, which are judged; here
    # its direction, row by row
    "state": ("min_cosine",),
}
# Tasks whose cosine is the worst of each last-axis vector's (a row, a step, a state).
ROW_COSINE = frozenset({"embedding", "sequence", "next_token", "state"})
# Tasks whose top-1 agreement is that of each last-axis vector's argmax.
TOP1 = frozenset({"classification", "next_token"})
# A decoder's outputs by their exporters' names (transformers/optimum, onnxruntime-genai):
# `auto` judges its logits [batch, seq, vocab] by the next token and its KV cache
# (core/kv_cache.py) as state: a cosine per row.
DECODER_LOGITS = "logits"


@dataclass(frozen=True)
class OutputTasks:
    default: str = "auto"
    per_output: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, model_cfg: ModelConfig) -> OutputTasks:
        given = getattr(model_cfg, "output_tasks", None) or {}
        return cls(str(model_cfg.task), {str(k): str(v) for k, v in given.items()})

    def task(self, name: str, reference: np.ndarray) -> str:
        """The output's task; `auto` resolved by the shape of its fp32 values."""
        task = self.per_output.get(name, self.default)
        if task != "auto":
            return task
        if name == DECODER_LOGITS and reference.ndim == 3:
            return "next_token"
        if is_cache(name) and reference.ndim == 4:
            return "state"
        if reference.ndim == 2 and reference.shape[1] > 1:
            return "classification"
        return "regression" if reference.ndim <= 1 else "dense"

    def check_outputs(self, outputs: list[str]) -> None:
        unknown = sorted(set(self.per_output) - set(outputs))
        if unknown:
            raise PipelineError(
                f"invalid config: model.output_tasks names '{unknown[0]}', which is not an "
                f"output of the model (its outputs: {', '.join(outputs)})"
            )


Arrays = dict[str, np.ndarray]  # one batch: arrays by output (or label) name


def decoder_phase(outputs: Mapping[str, np.ndarray]) -> str | None:
    """A decoder's step, read from its fp32 outputs: `prefill` where the KV cache it returns
    is as long as its logits (nothing before the prompt), `decode` where it is longer; None
    for a model without both."""
    logits = outputs.get(DECODER_LOGITS)
    present = next((v for k, v in outputs.items() if is_cache(k) and np.ndim(v) == 4), None)
    if logits is None or present is None or np.ndim(logits) != 3:
        return None
    return "prefill" if logits.shape[1] == present.shape[2] else "decode"


# (fp32 outputs, candidate outputs, labels or None) -> one number
Metric = Callable[[list[Arrays], list[Arrays], list[Arrays] | None], float]


@dataclass(frozen=True)
class UserMetric:
    name: str  # as configured: "mypkg.metrics:cer"
    fn: Metric
    # its module's bytes: a cached judgement of the metric before an edit is not its own
    source_sha256: str

    def __call__(
        self, reference: list[Arrays], candidate: list[Arrays], labels: list[Arrays] | None
    ) -> float:
        try:
            value = float(self.fn(reference, candidate, labels))
        except Exception as e:
            raise PipelineError(
                f"precision.gate.metric={self.name} failed: {type(e).__name__}: {first_line(e)}"
            ) from None
        return value


def user_metric(gate_cfg: AccuracyGate, source: str | None = None) -> UserMetric | None:
    """The configured task metric, imported and checked; None when there is none. Its
    module must lie under `source` (model.source, which the calibrate stage tracks), or
    DVC would not rerun the gate when the metric changes."""
    name = getattr(gate_cfg, "metric", None)
    if not name:
        return None
    from pipeline.inputs import factory, sample_data

    fn = factory.resolve_callable(str(name), "precision.gate.metric")
    module_file = factory.source_file(str(name), "precision.gate.metric")
    if source is not None and not sample_data.tracked_by(module_file, source):
        raise PipelineError(
            f"precision.gate.metric={name} lives in {module_file}, outside model.source="
            f"{source}, so DVC would not see it change; put it in the folder model.source names"
        )
    if (
        getattr(gate_cfg, "metric_max", None) is None
        and getattr(gate_cfg, "metric_min", None) is None
    ):
        raise PipelineError(
            f"precision.gate.metric={name} has no threshold; set precision.gate.metric_max "
            f"(an error such as CER) or precision.gate.metric_min (a score such as mAP)"
        )
    return UserMetric(str(name), fn, hashing.sha256_file(module_file))


def split_labels(outputs: Mapping[str, np.ndarray]) -> tuple[Arrays, Arrays]:
    """(model outputs, labels) of a reference batch: labels travel beside the fp32 outputs
    under `label:<name>` and are never compared as outputs."""
    real = {k: v for k, v in outputs.items() if not k.startswith(LABEL_PREFIX)}
    labels = {k[len(LABEL_PREFIX) :]: v for k, v in outputs.items() if k.startswith(LABEL_PREFIX)}
    return real, labels


def perplexity(
    name: str,
    reference: list[Arrays],
    candidate: list[Arrays],
    split: list[tuple[Arrays, Arrays]],
) -> dict[str, float]:
    """A decoder's perplexity over its prompts, fp32's and the candidate's, from the logits
    of every batch that carries the prompts' next tokens; {} where none does."""
    totals = np.zeros(2)
    count = 0
    for ref, got, (_, labels) in zip(reference, candidate, split):
        if NEXT_TOKENS not in labels:
            continue
        targets = labels[NEXT_TOKENS]
        keep = targets >= 0
        for i, logits in enumerate((ref[name], got[name])):
            totals[i] += _nll(np.asarray(logits, np.float64), targets)[keep].sum()
        count += int(keep.sum())
    if not count:
        return {}
    fp32, cand = np.exp(totals / count)
    return {
        "perplexity": float(cand),
        "perplexity_fp32": float(fp32),
        "perplexity_increase": float(cand / fp32 - 1.0),
    }


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log p(target) at each position of [batch, seq, vocab] logits."""
    shifted = logits - logits.max(-1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(-1))
    picked = np.take_along_axis(shifted, np.maximum(targets, 0)[..., None], -1)[..., 0]
    nll: np.ndarray = log_z - picked
    return nll
