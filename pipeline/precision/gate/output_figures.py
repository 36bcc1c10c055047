"""One output's accuracy figures over every batch, summed a batch at a time.

Every figure is a max, a mean, a ratio of sums or a worst sample or row, so each batch
adds its sums and its per-sample and per-row norms (a few numbers a row) and the outputs
are never stacked: a search judges tens of graphs, and a decoder's logits over its
prompts are hundreds of MB, twice that in float64. Each batch is widened to float64
alone (float32 sums of millions of values drift in their last digits).

A batch's output is read as rows (accuracy.compare's layouts):
- `rows`: [samples, values], where every batch has one width;
- `last`: rows of the last axis, where the widths differ but the last axis is shared (a
  decoder's prompt positions, then one step each): then each row is a sample;
- `flat`: one flat vector over every batch (an output whose shape follows the input's
  values): only the element-wise figures and one relative error apply."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NotRequired, TypedDict

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.precision.gate import tasks

Layout = Literal["rows", "last", "flat"]
# Rows whose reference norm is under this share of the largest are left out of the row
# cosines: a vector of almost nothing has a direction that rounding alone decides.
TINY_ROW = 1e-3
# A sample whose reference is all but zero is measured against this share of the largest
# sample's norm: an empty map's noise is not an error of 100%.
TINY_SAMPLE = 1e-3


class ElementwiseErrors(TypedDict):
    max_abs_error: float
    mean_rel_error: float


class OutputFigures(ElementwiseErrors):
    """One output's figures over all batches (compare adds its task, and a decoder's phases
    and perplexity); the optional ones where its task and shape allow them."""

    cosine: float  # of rows for ROW_COSINE tasks: the worst row's
    rel_error: float
    finite: bool
    cosine_mean: NotRequired[float]
    rows: NotRequired[int]  # the rows the row cosines were taken over
    top1_agreement: NotRequired[float]


def layout(name: str, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> Layout:
    """How `name`'s batches are read as rows; a batch count or shape that differs from the
    reference's is an error naming the output."""
    if len(reference) != len(candidate):
        raise PipelineError(
            f"output '{name}': {len(candidate)} batches, reference has {len(reference)}"
        )
    for i, (r, g) in enumerate(zip(reference, candidate)):
        if r.shape != g.shape:
            raise PipelineError(
                f"output '{name}' has shape {g.shape} in batch {i}, reference has {r.shape}"
            )
    if len({_width(r) for r in reference}) == 1:
        return "rows"
    if len({r.shape[-1] for r in reference}) == 1 and all(r.ndim >= 2 for r in reference):
        return "last"
    return "flat"


def _width(a: np.ndarray) -> int:
    # spelled out: reshape(0, -1) of an empty output (Range to nothing) is ambiguous
    return int(np.prod(a.shape[1:]))


def _as_rows(a: np.ndarray, how: Layout) -> np.ndarray:
    if how == "rows":
        return a.reshape(len(a), _width(a))
    if how == "last":
        return a.reshape(-1, a.shape[-1])
    return a.reshape(1, -1)  # one sample


def _dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each row's dot product, with no product array the size of the rows."""
    dots: np.ndarray = np.einsum("ij,ij->i", a, b)
    return dots


class _Sums:
    """What the batches added so far: sums over every value, and per sample and per row."""

    def __init__(self, last: int, row_cosines: bool, top1: bool) -> None:
        self.last, self.row_cosines, self.top1 = last, row_cosines, top1
        self.max_abs = self.rel_sum = self.dot = self.ref_sq = self.got_sq = 0.0
        self.values = self.top1_same = self.top1_rows = 0
        self.close = self.finite = True
        self.sample_ref: list[np.ndarray] = []  # each sample's ||ref||^2
        self.sample_diff: list[np.ndarray] = []  # each sample's ||got - ref||^2
        self.rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.by_rows = True  # every batch split into rows of `last`

    def add(self, ref: np.ndarray, got: np.ndarray, how: Layout) -> None:
        self.finite = self.finite and bool(np.isfinite(got).all())
        r, g = (
            _as_rows(np.asarray(ref, np.float64), how),
            _as_rows(np.asarray(got, np.float64), how),
        )
        if not r.size:
            self.sample_ref.append(np.zeros(len(r)))
            self.sample_diff.append(np.zeros(len(r)))
            return
        self.by_rows = self.by_rows and how != "flat" and r.shape[1] % self.last == 0
        # The dot products once, over rows of `last` where the rows are judged too; each
        # sample's are the sums of its rows'.
        width = self.last if self.by_rows else r.shape[1]
        rows_r, rows_g = r.reshape(-1, width), g.reshape(-1, width)
        rr, gg, rg = _dots(rows_r, rows_r), _dots(rows_g, rows_g), _dots(rows_r, rows_g)
        if self.by_rows:
            self._add_rows(rr, gg, rg, rows_r, rows_g, np.asarray(ref), np.asarray(got))
        d = g - r
        self.sample_ref.append(rr.reshape(len(r), -1).sum(1))
        self.sample_diff.append(_dots(d, d))
        self.ref_sq += float(rr.sum())
        self.got_sq += float(gg.sum())
        self.dot += float(rg.sum())
        if not rr.sum() * gg.sum() > 0:  # the cosine of nothing: whether the two agree
            self.close = self.close and bool(np.allclose(r, g))
        np.abs(d, out=d)
        self.max_abs = float(np.maximum(self.max_abs, d.max()))  # a NaN stays
        floor = np.abs(r)
        np.maximum(floor, 1e-6, out=floor)
        np.divide(d, floor, out=d)
        self.rel_sum += float(d.sum())
        self.values += d.size

    def _add_rows(
        self,
        rr: np.ndarray,
        gg: np.ndarray,
        rg: np.ndarray,
        r: np.ndarray,
        g: np.ndarray,
        ref: np.ndarray,
        got: np.ndarray,
    ) -> None:
        """The rows of `last` values (their dot products given): their cosines' parts, and
        top-1 agreement."""
        if self.row_cosines:
            rn, gn = np.sqrt(rr), np.sqrt(gg)
            zero = ~(rn * gn > 0)
            same = np.ones(len(r))
            if zero.any():  # isclose over the zero-norm rows only
                same[zero] = np.all(np.isclose(r[zero], g[zero]), axis=1)
            self.rows.append((rn, gn, rg, same))
        if self.top1 and self.last > 1:
            # argmax of the values as they came: widening keeps their order
            a, b = ref.reshape(-1, self.last), got.reshape(-1, self.last)
            self.top1_same += int((a.argmax(1) == b.argmax(1)).sum())
            self.top1_rows += len(a)

    def figures(self, how: Layout) -> OutputFigures:
        denom = np.sqrt(self.ref_sq) * np.sqrt(self.got_sq)
        out: OutputFigures = {
            "max_abs_error": self.max_abs,
            "mean_rel_error": self.rel_sum / self.values if self.values else 0.0,
            "cosine": self.dot / denom if denom > 0 else float(self.close),
            "rel_error": _worst_rel_error(*self._samples(how)),
            "finite": self.finite,
        }
        if how == "flat" or not self.by_rows or not self.values:
            return out
        if self.rows:
            rn, gn, dots, same = (np.concatenate(part) for part in zip(*self.rows))
            keep = rn >= rn.max() * TINY_ROW
            norms = rn[keep] * gn[keep]
            cos = np.where(norms > 0, dots[keep] / np.where(norms > 0, norms, 1.0), same[keep])
            if len(cos):
                out.update({"cosine": float(cos.min()), "cosine_mean": float(cos.mean())})
                out["rows"] = len(cos)
        if self.top1_rows:
            out["top1_agreement"] = self.top1_same / self.top1_rows
        return out

    def _samples(self, how: Layout) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each sample's squared norms; a flat output is one sample over every batch."""
        if how != "flat":
            return self.sample_ref, self.sample_diff
        return [np.array([sum(float(a.sum()) for a in self.sample_ref)])], [
            np.array([sum(float(a.sum()) for a in self.sample_diff)])
        ]


def _worst_rel_error(ref_sq: list[np.ndarray], diff_sq: list[np.ndarray]) -> float:
    """max over samples of ||got - ref|| / ||ref||, against TINY_SAMPLE of the largest."""
    norms = np.sqrt(np.concatenate(ref_sq)) if ref_sq else np.zeros(0)
    if not norms.size:
        return 0.0
    diffs = np.sqrt(np.concatenate(diff_sq))
    floor = max(float(norms.max()) * TINY_SAMPLE, 1e-12)
    return float((diffs / np.maximum(norms, floor)).max())


def over_batches(
    name: str,
    reference: Sequence[np.ndarray],
    candidate: Sequence[np.ndarray],
    task: str,
    last: int,
) -> OutputFigures:
    """`name`'s figures over every batch; `last` is the size of its last axis (the class
    axis, a step's vector), the rows that row cosines and top-1 are taken over."""
    refs = [np.atleast_1d(r) for r in reference]
    gots = [np.atleast_1d(g) for g in candidate]
    how = layout(name, refs, gots)
    sums = _Sums(max(last, 1), task in tasks.ROW_COSINE, task in tasks.TOP1)
    for r, g in zip(refs, gots):
        sums.add(r, g, how)
    return sums.figures(how)
