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

from pathlib import Path


def shared_stage_params(repo: Path | None = None) -> tuple[tuple[str, ...], ...]:
    """The params of each stage whose outputs jobs share, in pipeline order (the
    pipeline's own dvc.yaml unless `repo` names another)."""
    from pipeline.core import dvc_yaml
    from pipeline.sweeps.job import REPO

    return tuple(
        tuple(str(p) for p in s.get("params", []))
        for s in dvc_yaml.stages(repo or REPO).values()
        if not s.get("always_changed")
    )


def stage_rank(key: str, stages: tuple[tuple[str, ...], ...]) -> int:
    """The first shared stage that reads `key` (a group, or a dotted key under one);
    after every stage for a key no stage reads (sweep.*, hydra.*)."""
    for i, params in enumerate(stages):
        if any(key == p or key.startswith(f"{p}.") or p.startswith(f"{key}.") for p in params):
            return i
    return len(stages)


def ordered(jobs: list[list[str]], stages: tuple[tuple[str, ...], ...]) -> list[list[str]]:
    """Hydra's jobs (`key=value` lists, the product of the sweep's values, its last key
    varying fastest), reordered so the keys read earliest vary fastest; ties keep Hydra's order."""
    if not jobs:
        return jobs
    keys = [o.split("=", 1)[0].lstrip("+~") for o in jobs[0]]
    place = [
        {v: i for i, v in enumerate(dict.fromkeys(job[k] for job in jobs))}
        for k in range(len(keys))
    ]
    slowest_first = sorted(range(len(keys)), key=lambda k: -stage_rank(keys[k], stages))
    return sorted(jobs, key=lambda job: [place[k][job[k]] for k in slowest_first])
