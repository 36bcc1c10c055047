"""Joblib sweep workers that start with the heavy libraries already imported.

Hydra's joblib launcher runs jobs in loky workers, started once Hydra has composed the
sweep. Each worker would then import torch, ONNX Runtime, ModelOpt and matplotlib on its
first job: about 4 s of one core per worker, most of a small job, paid again by every
worker. Instead, loky forks its workers from a multiprocessing forkserver that imports
the heaviest of them once and is started before Hydra composes anything, so the import
runs on a second core while the first composes the sweep, and every worker inherits it.

Nothing that initialises CUDA runs before the fork: a forked child cannot use a CUDA
context its parent made. TensorRT stays in the jobs; torch imports cuda-python's and
NVML's bindings, which load no library until called (PyTorch's DataLoader forks after
`import torch` the same way). tests/test_warm_workers.py checks that the preload leaves
the CUDA driver and NVML unloaded and torch's CUDA uninitialised."""

from __future__ import annotations

import multiprocessing
from multiprocessing import forkserver

# What every job's steps import (export: numpy, onnx, torch, ONNX Runtime; the benchmark
# runs torch and ONNX Runtime too) and the job function's module with Hydra: about 3.5 s,
# mostly torch. Jobs start once the forkserver has finished it, so what is named here is
# a sweep's least start-up time, reused jobs (which import none of it) included: ModelOpt
# (2.5 s more, fp16/int8 only) and matplotlib (0.5 s, needed only at the benchmark) are
# left to the jobs, which import them while they run.
PRELOAD = ("pipeline.run", "numpy", "onnx", "onnxruntime", "torch")
JOBLIB = "hydra/launcher=joblib"


def wanted(overrides: list[str]) -> bool:
    """A multirun on the joblib launcher, chosen on the command line."""
    return any(o.lstrip("+") == JOBLIB for o in overrides)


def start(preload: tuple[str, ...] = PRELOAD) -> bool:
    """Start the forkserver (it imports `preload` in the background) and make loky fork
    its workers from it. False, changing nothing, where loky's start method is already
    chosen or fork is unavailable."""
    from joblib.externals.loky.backend import context as loky_context

    if loky_context.get_start_method() is not None or "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    multiprocessing.set_forkserver_preload(list(preload))
    forkserver.ensure_running()
    loky_context.set_start_method("forkserver")
    return True
