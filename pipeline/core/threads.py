"""How many intra-op threads this process's ONNX Runtime sessions and torch use.

OpenMP, MKL and OpenBLAS take OMP_NUM_THREADS (and their own variables) when they load;
ONNX Runtime reads none of them and starts one spinning thread per core. Jobs that share
a machine are given their share of its cores through those variables: joblib's loky
workers get cpu_count // n_jobs, Ray tasks their num_cpus, a SLURM job what its script
sets. A job that ignored them runs n_jobs x cores threads: on 2 cores, two sweep jobs'
benchmark loops measured torch at 160 ms where it takes 0.3 ms alone. So this tool's
ONNX Runtime sessions follow OMP_NUM_THREADS too, and torch is set to it explicitly (a
torch imported before the variable was set keeps the count it started with), unless
the config names a count."""

from __future__ import annotations

import os

ENV = "OMP_NUM_THREADS"


def intra_op(configured: int = 0) -> tuple[int, str]:
    """(threads, what chose them); 0 threads: each library's own default."""
    if configured:
        return int(configured), "benchmark.intra_op_threads"
    value = os.environ.get(ENV, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value), ENV
    return 0, "library default"
