"""Joblib sweep workers that start with the heavy libraries already imported.

Hydra's joblib launcher runs jobs in loky workers, started once Hydra has composed the
sweep. Each worker would then import torch, ONNX Runtime, ModelOpt and matplotlib on its
first job: about 4 s of one core per worker, most of a small job, paid again by every
worker. Instead, loky forks its workers from a multiprocessing forkserver that imports
those libraries once and is started before Hydra composes anything, so the import runs
on a second core while the first composes the sweep, and every worker inherits it.

Nothing that may initialise CUDA is imported before the fork (TensorRT, cuda-python and
NVML stay in the jobs): a forked child cannot use a CUDA context its parent made. The
libraries named here only load on import; tests/test_warm_workers.py checks that none
of them initialises CUDA."""

from __future__ import annotations

import multiprocessing
from multiprocessing import forkserver

# What every job's steps import (export: numpy, onnx, torch, ONNX Runtime; benchmark:
# matplotlib's Figure) and the job function's module with Hydra: about 4 s of imports,
# which the forkserver finishes while Hydra composes the sweep, so a sweep whose jobs
# are all reused (they import none of it) does not wait for it. ModelOpt (2.5 s more,
# fp16/int8 only) is left to the jobs that calibrate: preloading it would make every
# sweep wait for it.
PRELOAD = ("pipeline.run", "numpy", "onnx", "onnxruntime", "torch", "matplotlib.figure")
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
