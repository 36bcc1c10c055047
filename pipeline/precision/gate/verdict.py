"""A verdict on samples the search never saw.

A search (the fallback, precision=auto, the embedding tables' types) picks the graph that
passes on the reference samples it judges, so a pass there is a figure fitted to those
samples: on a real sentence encoder, three graphs that passed a 0.99 worst-row cosine on
the reference sentences scored 0.985 to 0.987 on sentences from the same source that the
pipeline never read. So the reference batches split in two: the search judges on one part,
under a gate tightened by `precision.search_margin`, and the final gate judges the written
graph on the other (`precision.holdout` of the samples), once.

The split keeps what belongs together: a decoder's prefill and the decode steps that follow
it stay in one part (a step continues its prompt); other batches split whole, or, where the
reference set is one batch, by sample."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, cast

import numpy as np

from pipeline.inputs import samples
from pipeline.precision.gate import tasks

if TYPE_CHECKING:
    from pipeline.core.config import AccuracyGate
    from pipeline.core.gate import GateResult
    from pipeline.precision.gate.accuracy import Criteria, ReferenceBatch
    from pipeline.records.calibration_file import Judgement

# Fewer held-out samples than this and the verdict says how little it can show: the worst of
# n samples misses a one-in-n failure about as often as it catches it.
FEW_SAMPLES = 8


@dataclass(frozen=True)
class Holdout:
    """How a quantized mode's reference batches split (precision.holdout) and how far inside
    the gate its search must pass (precision.search_margin)."""

    share: float
    margin: float
    axes: samples.Axes

    def split(self, pairs: list[ReferenceBatch]) -> Split:
        parts = split(pairs, self.share, self.axes)
        parts.info["margin"] = self.margin
        return parts

    def searching(self, criteria: Criteria) -> Criteria:
        return tightened(criteria, self.margin)


def unsplit(pairs: list[ReferenceBatch]) -> Split:
    """No search judges these batches: the verdict is on all of them (`info` empty)."""
    return Split(pairs, pairs, {})


@dataclass(frozen=True)
class Split:
    search: list[ReferenceBatch]  # what the search judges its choices on
    verdict: list[ReferenceBatch]  # what the written graph is judged on, once
    info: dict[str, Any]  # samples in each part, the share, the margin, and a note if few


def split(pairs: list[ReferenceBatch], share: float, axes: samples.Axes) -> Split:
    """`pairs` in a search part and a held-out part of about `share` of the samples. With
    share 0, or a single sample, both parts are every pair (said in `info`)."""
    groups = _groups(pairs)
    if share <= 0 or sum(_count(g, axes) for g in groups) < 2:
        return _unsplit(pairs, axes, share, "precision.holdout is 0" if share <= 0 else None)
    if len(groups) == 1:
        parts = _by_sample(groups[0], share, axes)
        if parts is None:
            return _unsplit(pairs, axes, share, "one reference batch that cannot split by sample")
        search, verdict = parts
    else:
        held = _held_groups(len(groups), share)
        search = [p for i, g in enumerate(groups) if i not in held for p in g]
        verdict = [p for i, g in enumerate(groups) if i in held for p in g]
    info: dict[str, Any] = {
        "share": share,
        "search_samples": sum(samples.count(p[0], axes) for p in search),
        "verdict_samples": sum(samples.count(p[0], axes) for p in verdict),
        "search_batches": len(search),
        "verdict_batches": len(verdict),
    }
    if info["verdict_samples"] < FEW_SAMPLES:
        info["note"] = few_note(info["verdict_samples"])
    return Split(search, verdict, info)


def few_note(n: int) -> str:
    return (
        f"the held-out verdict rests on {n} sample{'s' if n != 1 else ''}: it shows little; "
        f"give model.reference_data more samples"
    )


def tightened(criteria: Criteria, margin: float) -> Criteria:
    """The criteria the search judges by: every threshold moved `margin` of the way from
    its limit towards perfect (fallback.score 1.0 becomes 1 - margin), so that what passes
    on the search's samples holds on samples it never saw."""
    from dataclasses import replace

    from omegaconf import OmegaConf

    from pipeline.precision.gate.accuracy import GATE_CHECKS

    if margin <= 0:
        return criteria
    moved: dict[str, float] = {}
    for key, _, direction in GATE_CHECKS:
        gate = criteria.gate
        value = gate.get(key) if hasattr(gate, "get") else getattr(gate, key, None)
        if value is None:
            continue
        t = float(value)
        moved[key] = t * (1 - margin) if direction == "max" else 1 - (1 - t) * (1 - margin)
    # merge() gives a DictConfig of the same schema: still an AccuracyGate to its readers
    gate = cast("AccuracyGate", OmegaConf.merge(criteria.gate, moved))
    return replace(criteria, gate=gate)


class SearchFigure(TypedDict):
    """calibration.json's search_judgement: the chosen graph judged on the search's samples,
    under its tightened gate (beside the verdict, on the held-out ones)."""

    accuracy: dict[str, dict[str, Any]]  # output -> metric -> figure
    gate: list[GateResult]
    gate_passed: bool
    samples: int  # the search's samples
    margin: float  # precision.search_margin


def brief(judged: Judgement, info: dict[str, Any]) -> SearchFigure:
    """The search's own figure of the graph it chose, for calibration.json beside the
    verdict: its accuracy and its gate (the tightened one) on the search's samples."""
    return {
        "accuracy": judged["accuracy"],
        "gate": judged["gate"],
        "gate_passed": judged["gate_passed"],
        "samples": info["search_samples"],
        "margin": info.get("margin", 0.0),
    }


def failure_hint(summary: Mapping[str, Any]) -> str:
    """What a verdict failure after a passing search means, and the ways out."""
    info, search = summary.get("holdout"), summary.get("search_judgement")
    if not info or not search or not search.get("gate_passed"):
        return ""
    if info["verdict_samples"] == info["search_samples"] and "note" in info:
        return f" ({info['note']})"
    few = f"; {info['note']}" if "note" in info else ""
    return (
        f" (held out: {info['verdict_samples']} samples the search never judged; on its own "
        f"{info['search_samples']} the graph passes with margin {info.get('margin', 0.0):g}: "
        f"the choice was fitted to them; raise precision.search_margin or give more reference "
        f"samples{few})"
    )


def _groups(pairs: list[ReferenceBatch]) -> list[list[ReferenceBatch]]:
    """Batches that belong together: a decoder's prefill with the steps after it; any other
    batch alone."""
    out: list[list[ReferenceBatch]] = []
    for p in pairs:
        phase = tasks.decoder_phase(tasks.split_labels(p[1])[0])
        if phase == "decode" and out:
            out[-1].append(p)
        else:
            out.append([p])
    return out


def _count(group: list[ReferenceBatch], axes: samples.Axes) -> int:
    return sum(samples.count(p[0], axes) for p in group)


def _held_groups(n: int, share: float) -> set[int]:
    """Which of n groups are held out: about `share` of them (at least one, never all),
    spread evenly, so an ordered reference set (sorted by kind, by length) gives both
    parts of every kind."""
    k = min(n - 1, max(1, round(n * share)))
    return {min(n - 1, math.floor((j + 0.5) * n / k)) for j in range(k)}


def _by_sample(
    group: list[ReferenceBatch], share: float, axes: samples.Axes
) -> tuple[list[ReferenceBatch], list[ReferenceBatch]] | None:
    """One batch split by sample, where its outputs count samples on axis 0 as its inputs
    do on theirs; None where they do not."""
    if len(group) != 1:
        return None
    inputs, outputs = group[0]
    n = samples.count(inputs, axes)
    if n < 2 or not all(np.ndim(v) and len(v) == n for v in outputs.values()):
        return None
    held = sorted(_held_groups(n, share))
    kept = [i for i in range(n) if i not in held]

    def part(idx: list[int]) -> ReferenceBatch:
        return samples.take(inputs, axes, idx), {k: v[idx] for k, v in outputs.items()}

    return [part(kept)], [part(held)]


def _unsplit(
    pairs: list[ReferenceBatch], axes: samples.Axes, share: float, why: str | None
) -> Split:
    n = sum(samples.count(p[0], axes) for p in pairs)
    info: dict[str, Any] = {
        "share": share,
        "search_samples": n,
        "verdict_samples": n,
        "search_batches": len(pairs),
        "verdict_batches": len(pairs),
        "note": (
            f"the verdict re-reads the search's {n} samples ({why or 'too few to split'}): "
            f"a pass there was fitted to them"
        ),
    }
    return Split(pairs, pairs, info)
