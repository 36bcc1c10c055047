"""Greedy generation through a backend, as a server runs a decoder: the prompt as a prefill
(an empty KV cache), then one token at a time, each step fed the token the step before
picked and the cache it returned; time to first token, time per output token and tokens
per second from the run itself, and the tokens held against the fp32 graph's.

The prompts and the fp32 graph's tokens are the export's reference (model.prompts): each
prefill batch there starts a run, and the token the fp32 graph picked after each step is
the argmax of that step's last logits. A run takes as many steps as the reference did.

Where the cache lives is the stepper's business: `HostSteps` feeds any backend through
`Runner.infer`, the cache on the host between steps (ONNX Runtime, PyTorch); an engine on
a GPU keeps it on the device (bench/trt_generation.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypedDict

import numpy as np

from pipeline.bench import decoder_bench
from pipeline.inputs import decoder_runs
from pipeline.inputs.decoder_profiles import kv_inputs

if TYPE_CHECKING:
    from pipeline.bench.runner import Feeds, Runner
    from pipeline.graph.onnx_model import TensorSpec
    from pipeline.inputs.profiles import Profile
    from pipeline.inputs.reference_file import Pair


class Steps(Protocol):
    """One run's steps: `start` a prompt, then `step` one token at a time; each returns the
    last position's logits [batch, vocab] on the host."""

    def start(self, ids: np.ndarray) -> np.ndarray: ...
    def step(self, ids: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Prompt:
    ids: np.ndarray  # [batch, tokens]: a reference prefill's input_ids
    fp32: np.ndarray  # [batch, steps + 1]: the tokens the fp32 graph picked after it


def reference_prompts(pairs: list[Pair], specs: list[TensorSpec]) -> list[Prompt]:
    """The reference's runs: each prefill batch's prompt and the fp32 graph's greedy tokens
    over it and the decode steps that follow it."""
    runs: list[tuple[np.ndarray, list[np.ndarray]]] = []
    for feeds, outputs in pairs:
        picked = decoder_runs.logits_of(outputs)[:, -1, :].argmax(-1)
        if decoder_runs.phase(feeds, specs) == "prefill":
            runs.append((np.asarray(feeds["input_ids"]), [picked]))
        elif runs:
            runs[-1][1].append(picked)
    return [Prompt(ids, np.stack(tokens, axis=1)) for ids, tokens in runs]


class Run(TypedDict):
    """One greedy run: its tokens [batch, steps], the prefill's seconds and each step's."""

    tokens: np.ndarray
    first_s: float
    step_s: list[float]


class GenerationSummary(TypedDict):
    """benchmark.json's `generation` of one backend."""

    runs: int
    tokens: int
    fp32_tokens_agree: float | None  # the share of its tokens that are the fp32 graph's
    first_difference: int | None  # the first step where a run parted from fp32's
    ttft_ms: float | None  # medians over every run
    tpot_ms: float | None
    tokens_per_s: float | None


def generate(steps: Steps, prompt: Prompt) -> Run:
    """One greedy run over `prompt` as long as the fp32 graph's: its tokens, the seconds of
    its prefill and of each decode step."""
    count = prompt.fp32.shape[1]
    t0 = time.perf_counter()
    logits = steps.start(prompt.ids)
    first = time.perf_counter() - t0
    tokens, per_step = [logits.argmax(-1)], []
    for _ in range(count - 1):
        t0 = time.perf_counter()
        logits = steps.step(tokens[-1][:, None].astype(prompt.ids.dtype))
        per_step.append(time.perf_counter() - t0)
        tokens.append(logits.argmax(-1))
    return {"tokens": np.stack(tokens, axis=1), "first_s": first, "step_s": per_step}


def summary(runs: list[Run], prompts: list[Prompt]) -> GenerationSummary:
    """benchmark.json's `generation` of one backend: how many of its tokens are the fp32
    graph's, where the first run parted from it, and TTFT, TPOT (medians) and tokens per
    second over every run."""
    same = sum(int((r["tokens"] == p.fp32).sum()) for r, p in zip(runs, prompts, strict=True))
    total = sum(p.fp32.size for p in prompts)
    parted = [_first_difference(r["tokens"], p.fp32) for r, p in zip(runs, prompts, strict=True)]
    steps = [s for r in runs for s in r["step_s"]]
    seconds = sum(r["first_s"] + sum(r["step_s"]) for r in runs)
    return {
        "runs": len(runs),
        "tokens": total,
        "fp32_tokens_agree": round(same / total, 4) if total else None,
        "first_difference": min((d for d in parted if d is not None), default=None),
        "ttft_ms": float(np.median([r["first_s"] for r in runs]) * 1e3) if runs else None,
        "tpot_ms": float(np.median(steps) * 1e3) if steps else None,
        "tokens_per_s": total / seconds if seconds else None,
    }


def _first_difference(tokens: np.ndarray, fp32: np.ndarray) -> int | None:
    """The first step (0: the prefill's token) where any sequence of the batch differs."""
    differs = (tokens != fp32).any(axis=0)
    return int(differs.argmax()) if differs.any() else None


class HostSteps:
    """Steps through `Runner.infer`: the cache comes back to the host after each step and
    is fed again; each phase in its own profile where the backend has profiles."""

    def __init__(self, runner: Runner, specs: list[TensorSpec], profiles: list[Profile]):
        self.runner, self.specs, self.profiles = runner, specs, profiles
        self.kv = [t.name for t in kv_inputs(specs)]
        self.present: dict[str, str] = {}
        self.past: Feeds = {}
        self.done = 0

    def start(self, ids: np.ndarray) -> np.ndarray:
        self.past = decoder_runs.empty_pasts(self.specs, len(ids))
        self.done = 0
        return self._run(ids)

    def step(self, ids: np.ndarray) -> np.ndarray:
        return self._run(ids)

    def _run(self, ids: np.ndarray) -> np.ndarray:
        feeds = {**decoder_runs.token_feeds(self.specs, ids, self.done), **self.past}
        phase = "decode" if self.done else "prefill"
        got = self.runner.infer(feeds, decoder_bench.profile_index(feeds, self.profiles, phase))
        if not self.present:
            self.present = decoder_runs.present_outputs(self.specs, list(got))
        self.past = {name: got[self.present[name]] for name in self.kv}
        self.done += ids.shape[1]
        return decoder_runs.logits_of(got)[:, -1, :]
