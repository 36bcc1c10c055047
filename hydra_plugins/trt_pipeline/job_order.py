"""The order a sweep's jobs start in: jobs that share work are not started side by side.

Jobs that need the same intermediate product (one ONNX export, one AutoCast or Q/DQ
graph) make it once: the first takes the cache's lock, the others wait for it, then
use it. A parallel launcher starts neighbouring jobs side by side, and Hydra's basic
sweeper varies the last key fastest, so `precision=fp32,fp16,int8 profile=a,b` would
start fp16/a with fp16/b: one worker casts the graph to fp16 while the other waits,
one core idle for the length of the cast (and again for int8's quantization).

So the keys that the earliest shared stage reads vary fastest here: neighbours differ
as early in the pipeline as they can, each makes its own product side by side, and the
job that shares it starts later and finds it made. The stages and what they read are
dvc.yaml's (`params`); the fingerprint stage always runs and shares nothing, so it does
not count. Only the order of the jobs changes, not their set, and each job's overrides
keep the order they were given in (the folder name and .hydra/overrides.yaml)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def shared_stage_params(repo: Path = REPO) -> tuple[tuple[str, ...], ...]:
    """The params of each stage whose outputs jobs share, in pipeline order."""
    from pipeline.core import dvc_stages

    return tuple(tuple(str(p) for p in s.get("params", [])) for s in dvc_stages.stages(repo).values()
                 if not s.get("always_changed"))


def stage_rank(key: str, stages: tuple[tuple[str, ...], ...]) -> int:
    """The first shared stage that reads `key` (a group, or a dotted key under one);
    after every stage for a key no stage reads (sweep.*, hydra.*)."""
    for i, params in enumerate(stages):
        if any(key == p or key.startswith(f"{p}.") or p.startswith(f"{key}.") for p in params):
            return i
    return len(stages)


def jobs(overrides: list[Any], stages: tuple[tuple[str, ...], ...]) -> list[list[str]]:
    """Every job's overrides (Hydra's parsed discrete sweeps and plain values), the keys
    read earliest varying fastest; ties keep the given order, as Hydra's would."""
    values = []
    for o in overrides:
        key = o.get_key_element()
        sweep = o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]
        values.append([f"{key}={v}" for v in sweep])
    # itertools.product varies its last list fastest: the latest-read keys go first.
    order = sorted(range(len(overrides)), key=lambda i: -stage_rank(overrides[i].key_or_group, stages))
    where = {i: pos for pos, i in enumerate(order)}
    return [[job[where[i]] for i in range(len(overrides))]
            for job in itertools.product(*(values[i] for i in order))]
