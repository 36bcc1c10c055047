"""The conditions a benchmark ran under, recorded beside its figures (benchmark.json's
`conditions`): the machine's fingerprint, the CPU and its governor, the threads each
library used, the library versions, and the GPU's readings before and after
(pipeline.machine.gpu_conditions)."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.core import threads
from pipeline.machine.fingerprint import package_version
from pipeline.records.benchmark_file import BenchConditions
from pipeline.records.fingerprint_file import FingerprintRecord

if TYPE_CHECKING:
    from pipeline.core.config import BenchmarkConfig
    from pipeline.records.benchmark_file import GpuSnapshot


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def conditions(
    bench_cfg: BenchmarkConfig,
    fingerprint: FingerprintRecord,
    gpu_before: GpuSnapshot,
    gpu_after: GpuSnapshot,
) -> BenchConditions:
    governor = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    torch = sys.modules.get("torch")
    intra_op, threads_from = threads.intra_op(int(bench_cfg.intra_op_threads))
    return {
        "fingerprint": fingerprint["id"],
        "target": fingerprint.get("target"),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "cpu_governor": governor.read_text().strip() if governor.exists() else None,
        "intra_op_threads": intra_op or "library default",
        "threads_from": threads_from,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "onnxruntime": package_version("onnxruntime") or package_version("onnxruntime-gpu"),
            "torch": package_version("torch"),
            "tensorrt": f"{fingerprint['trt_flavour']} {fingerprint['trt_version']}",
            "nvidia-ml-py": package_version("nvidia-ml-py"),
        },
        "gpu_before": gpu_before,
        "gpu_after": gpu_after,
    }
