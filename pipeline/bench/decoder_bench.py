"""A decoder's two phases timed apart, as its users count them: time to first token (a
prefill of a prompt over an empty KV cache) at given prompt lengths, time per output token
(one decode step over a past of a given length), the tokens per second of each, and the
KV cache's bytes. Each backend runs both phases with the same feeds; an engine runs each
in its own profile (`prefill`, `decode` where the engine has them by name).

A step is timed at a fixed past length rather than along a generation: the time of a
decode step depends on the past's length alone, so a row per length says what a
generation of any length costs (the sum over its steps), with no token's value in it.
On a GPU the TensorRT runner keeps its inputs on the device between iterations when
benchmark.device_copies is false: the KV cache then stays there, as in a serving loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from pipeline.bench.bench_shapes import locate
from pipeline.bench.runner import Feeds, Runner
from pipeline.core.errors import PipelineError
from pipeline.graph.onnx_model import TensorSpec
from pipeline.inputs import decoder_runs
from pipeline.inputs.decoder_profiles import kv_dims, kv_inputs
from pipeline.inputs.profiles import Profile

if TYPE_CHECKING:
    from pipeline.core.config import DecoderBench

# Token ids are drawn below this where the vocabulary is unknown (model.int_high's default).
TOKEN_BOUND = 100
Timer = Callable[[Runner, Feeds, int, str], float]  # (runner, feeds, profile, label) -> ms


@dataclass(frozen=True)
class Plan:
    """What is timed: prompt lengths (prefill) and past lengths (decode), at one batch."""

    batch: int
    input_lens: list[int]
    past_lens: list[int]
    vocabulary: int = TOKEN_BOUND  # token ids are drawn below it


def vocabulary(outputs: list[TensorSpec]) -> int | None:
    """A decoder's vocabulary: the fixed last dim of its `logits` (None where there is none)."""
    logits = next((o for o in outputs if o.name == decoder_runs.LOGITS and len(o.dims) == 3), None)
    size = logits.dims[-1] if logits is not None else None
    return size if isinstance(size, int) and size > 0 else None


def applies(specs: list[TensorSpec]) -> bool:
    """A graph with a KV cache (benchmark.json's `decoder` says why where one cannot be fed)."""
    return bool(kv_inputs(specs))


def plan(settings: DecoderBench, profiles: list[Profile], vocab: int | None = None) -> Plan:
    """benchmark.decoder's lengths, or the min, opt and max of the profiles' own: the
    prompt's (input_ids' last dim) where the past can be empty, the past's where it is not."""
    prefill, decode = _phase_profile(profiles, "prefill"), _phase_profile(profiles, "decode")
    inputs = list(settings.input_lens) or _points(prefill, "input_ids", 1)
    past = list(settings.past_lens) or _points(decode, kv_name(decode), 2)
    if min([*inputs, 1]) < 1 or min([*past, 1]) < 1 or int(settings.batch) < 1:
        raise PipelineError(
            f"benchmark.decoder: lengths and batch must be at least 1 (input_lens={inputs}, "
            f"past_lens={past}, batch={settings.batch})"
        )
    return Plan(int(settings.batch), sorted(set(inputs)), sorted(set(past)), vocab or TOKEN_BOUND)


class KvCacheSize(TypedDict):
    """benchmark.json's `decoder.kv_cache`."""

    tensors: int
    bytes_per_token: int  # of one sequence
    max_batch: int  # the largest batch and past the profiles allow
    max_past: int
    bytes_at_max: int  # what a serving engine must hold per context at those


def kv_cache(specs: list[TensorSpec], profiles: list[Profile]) -> KvCacheSize:
    """The KV cache's size: bytes per token of one sequence, and at the largest batch and
    past the profiles allow (what a serving engine must hold per context)."""
    kv = kv_inputs(specs)
    per_token = sum(
        np.prod(kv_dims(t, "the decoder benchmark cannot size it")) * np.dtype(t.dtype).itemsize
        for t in kv
    )
    biggest = max((p["inputs"][kv[0].name]["max"] for p in profiles), key=lambda s: s[0] * s[2])
    batch, past = int(biggest[0]), int(biggest[2])
    return {
        "tensors": len(kv),
        "bytes_per_token": int(per_token),
        "max_batch": batch,
        "max_past": past,
        "bytes_at_max": int(per_token) * batch * past,
    }


class DecoderPhases(TypedDict):
    """One backend's two phases, by length (a str: JSON's keys): median ms, tokens/s."""

    ttft_ms: dict[str, float]  # prompt length -> time to first token
    prefill_tokens_per_s: dict[str, float]  # prompt tokens, over the whole batch
    tpot_ms: dict[str, float]  # past length -> time per output token
    decode_tokens_per_s: dict[str, float]


def measure(
    runner: Runner,
    specs: list[TensorSpec],
    profiles: list[Profile],
    what: Plan,
    timer: Timer,
) -> DecoderPhases:
    """TTFT and TPOT (median ms) by length, with tokens per second, for one backend."""
    rng = np.random.default_rng(0)
    ttft, tpot = {}, {}
    for length in what.input_lens:
        feeds = step_feeds(specs, what.batch, length, 0, rng, what.vocabulary)
        ttft[length] = timer(
            runner, feeds, profile_index(feeds, profiles, "prefill"), f"prefill {length}"
        )
    for past in what.past_lens:
        feeds = step_feeds(specs, what.batch, 1, past, rng, what.vocabulary)
        tpot[past] = timer(
            runner, feeds, profile_index(feeds, profiles, "decode"), f"decode past {past}"
        )
    b = what.batch
    return {
        "ttft_ms": {str(n): ms for n, ms in ttft.items()},
        "prefill_tokens_per_s": {str(n): b * n * 1e3 / ms for n, ms in ttft.items()},
        "tpot_ms": {str(p): ms for p, ms in tpot.items()},
        "decode_tokens_per_s": {str(p): b * 1e3 / ms for p, ms in tpot.items()},
    }


def step_feeds(
    specs: list[TensorSpec],
    batch: int,
    new: int,
    past: int,
    rng: np.random.Generator,
    vocab: int = TOKEN_BOUND,
) -> Feeds:
    """One step's inputs: `new` tokens (below `vocab`) over a past of `past` (random cache
    values: a step's time does not depend on them)."""
    ids = rng.integers(0, vocab, size=(batch, new))
    feeds = decoder_runs.token_feeds(specs, ids, past)
    for t in kv_inputs(specs):
        heads, size = kv_dims(t, "the decoder benchmark cannot size it")
        feeds[t.name] = rng.standard_normal((batch, heads, past, size)).astype(t.dtype)
    return feeds


def kv_name(profile: Profile) -> str:
    return str(next(n for n, s in profile["inputs"].items() if len(s["min"]) == 4))


def _phase_profile(profiles: list[Profile], phase: str) -> Profile:
    """The profile named for the phase; else, for a prefill, the first whose past can be
    empty, for a decode the first whose past cannot; else the first."""
    named = [p for p in profiles if p.get("name") == phase]
    if named:
        return named[0]
    kv = kv_name(profiles[0])
    fits = [p for p in profiles if (p["inputs"][kv]["min"][2] == 0) == (phase == "prefill")]
    return (fits or profiles)[0]


def _points(profile: Profile, name: str, axis: int) -> list[int]:
    shapes = profile["inputs"][name]
    return [max(1, int(shapes[p][axis])) for p in ("min", "opt", "max")]


def profile_index(feeds: Feeds, profiles: list[Profile], phase: str) -> int:
    """The phase's own profile where it holds the feeds, else the first that does."""
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    own = _phase_profile(profiles, phase)
    index = profiles.index(own)
    try:
        locate(shapes, [own])
        return index
    except PipelineError:
        return locate(shapes, profiles)
