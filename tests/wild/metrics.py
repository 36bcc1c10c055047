"""Task metrics for the OCR recognizer: greedy CTC decoding with PaddleOCR's dictionary and
the character error rate. Small enough to serve as a user-supplied task metric example."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def read_keys(path: str | Path) -> list[str]:
    """Class index -> character: CTC blank at 0, the dictionary's lines, then a space (what
    PaddleOCR's CTCLabelDecode does with use_space_char=True). Lines are split as RapidOCR
    splits the model's "character" metadata (str.splitlines)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return ["", *lines, " "]


def ctc_greedy_decode(probs: np.ndarray, keys: list[str]) -> list[str]:
    """[batch, time, classes] scores -> one string per sample: best class per step, repeats
    merged, blanks (class 0) dropped."""
    if probs.ndim != 3 or probs.shape[2] != len(keys):
        raise ValueError(f"scores of shape {probs.shape} do not fit {len(keys)} keys")
    best = probs.argmax(axis=2)
    texts = []
    for row in best:
        keep = np.ones(len(row), dtype=bool)
        keep[1:] = row[1:] != row[:-1]
        keep &= row != 0
        texts.append("".join(keys[i] for i in row[keep]))
    return texts


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions cost 1."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def cer(ref_text: str, hyp_text: str) -> float:
    """Character error rate: edits to turn the hypothesis into the reference, per reference
    character (0 is perfect; it can pass 1 when the hypothesis is much longer)."""
    if not ref_text:
        return float(bool(hyp_text))
    return edit_distance(ref_text, hyp_text) / len(ref_text)


def mean_cer(refs: list[str], hyps: list[str]) -> float:
    """Corpus CER: total edits over total reference characters."""
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    total = sum(len(r) for r in refs)
    return sum(edit_distance(r, h) for r, h in zip(refs, hyps)) / max(total, 1)
