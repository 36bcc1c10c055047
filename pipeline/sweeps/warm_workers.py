"""Joblib sweep workers that start with the heavy libraries already imported.

Hydra's joblib launcher runs jobs in loky workers, started once Hydra has composed the
sweep. Each worker would then import torch, ONNX Runtime, ModelOpt and matplotlib on its
first job: about 4 s of one core per worker, most of a small job, paid again by every
worker. Instead, loky forks its workers from a multiprocessing forkserver that imports
the heaviest of them once and is started before Hydra composes anything, so the import
runs on a second core while the first composes the sweep, and every worker inherits it.

loky passes each worker the thread limits that keep n_jobs jobs from oversubscribing
the cores (OMP_NUM_THREADS and the like, cpu_count // n_jobs), but only to workers it
starts itself: a forkserver's workers get the server's environment, and the libraries the
server preloaded have already read it. So the server is started with loky's limits for
this sweep's n_jobs in its environment (without them, two jobs on 2 cores each ran two
spinning torch threads, and a benchmark took 500x longer).

Nothing that initialises CUDA runs before the fork: a forked child cannot use a CUDA
context its parent made. TensorRT stays in the jobs; torch imports cuda-python's and
NVML's bindings, which load no library until called (PyTorch's DataLoader forks after
`import torch` the same way). tests/sweeps/test_warm_workers.py checks that the preload leaves
the CUDA driver and NVML unloaded and torch's CUDA uninitialised."""

from __future__ import annotations

import multiprocessing
import os
import re
from multiprocessing import forkserver

# What every job's steps import (export: numpy, onnx, torch, ONNX Runtime; the benchmark
# runs torch and ONNX Runtime too) and the job function's module with Hydra: about 1.2 s
# here, mostly torch, imported by the server's one preload module, pipeline/sweeps/warm_server.py
# (which also freezes it for the garbage collector and lets the server exit quickly).
# Workers start once the server has finished it, so what is named here is the least
# start-up time of a sweep with jobs to run (reused jobs are restored before any worker
# starts: hydra_plugins/trt_pipeline/reuse_first.py). ModelOpt (0.8 s more, fp16/int8
# only) and matplotlib (0.3 s, at the benchmark) are left to the jobs: preloaded, they
# would delay both workers by what each importing them costs one.
PRELOAD = ("pipeline.sweeps.job", "numpy", "onnx", "onnxruntime", "torch")
JOBLIB = "hydra/launcher=joblib"
_N_JOBS = re.compile(r"^\+{0,2}hydra\.launcher\.n_jobs=(.*)$")


def wanted(overrides: list[str]) -> bool:
    """A multirun on the joblib launcher, chosen on the command line."""
    return any(o.lstrip("+") == JOBLIB for o in overrides)


def n_jobs(overrides: list[str]) -> int | None:
    """The sweep's hydra.launcher.n_jobs (the launcher's default, -1, when not given);
    None when it is not a plain integer (Hydra resolves it, and reports a bad one)."""
    given = [m.group(1).strip() for o in overrides if (m := _N_JOBS.match(o))]
    try:
        return int(given[-1]) if given else -1
    except ValueError:
        return None


def thread_limits(jobs: int) -> dict[str, str]:
    """The environment loky gives each of its own workers for `jobs` parallel jobs."""
    from joblib._parallel_backends import LokyBackend

    backend = LokyBackend()
    env: dict[str, str] = backend._prepare_worker_env(n_jobs=backend.effective_n_jobs(jobs))
    return env


def start(preload: tuple[str, ...] = PRELOAD, jobs: int = -1) -> bool:
    """Start the forkserver (it imports `preload` in the background, under loky's thread
    limits for `jobs` workers) and make loky fork its workers from it. False, changing
    nothing, where loky's start method is already chosen or fork is unavailable."""
    from joblib.externals.loky.backend import context as loky_context

    if (
        loky_context.get_start_method() is not None
        or "forkserver" not in multiprocessing.get_all_start_methods()
    ):
        return False
    from pipeline.sweeps import warm_server

    multiprocessing.set_forkserver_preload(
        [warm_server.__name__]
    )  # it imports `preload`, named here:
    server_env, saved = (
        {**thread_limits(jobs), warm_server.MARK: ",".join(preload)},
        dict(os.environ),
    )
    os.environ.update(server_env)  # the server's environment is copied when it starts, here
    try:
        forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    loky_context.set_start_method("forkserver")
    return True
