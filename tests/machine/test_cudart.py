"""pipeline.machine.cudart on any machine: cuda.bindings answers what needs no
driver, and a call that fails is one PipelineError line naming the call and CUDA's
own words. The calls that need a GPU are exercised by tests/bench/test_benchmark_gpu.py
and benchmarks/gpu_check.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from pipeline.core.errors import PipelineError
from pipeline.machine import cudart, shared_runtime
from pipeline.machine.cudart import Cuda


def test_runtime_version_needs_no_driver():
    version = Cuda.get().runtime_version()
    assert re.fullmatch(r"\d+\.\d+", version)
    # cuda-bindings' own runtime: 13.x wheels link a CUDA 13 runtime, as TensorRT-RTX cu13 is built for.
    assert version.split(".")[0] == cudart.bindings_version().split(".")[0]


def test_a_failed_call_names_the_call_and_the_cuda_error():
    # No device has this ordinal: fails alike with a GPU (invalid device) and without a driver.
    with pytest.raises(PipelineError) as e:
        Cuda.get().pci_bus_id(9999)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("CUDA cudaDeviceGetPCIBusId failed: ") and re.search(
        r"\(cudaError\w+ = \d+\)$", msg
    )


def test_fingerprint_reads_the_shared_runtime_not_the_bindings_pin():
    """The fingerprint's runtime is the libcudart TensorRT would load; cuda.bindings'
    static runtime is our pin and must not move fingerprint ids."""
    version, source = shared_runtime.cuda_runtime()
    if version is None:
        assert source == "no shared CUDA runtime (libcudart) found"
    else:
        assert source.startswith("cudaRuntimeGetVersion of ") and "libcudart" in source
        assert re.fullmatch(r"\d+\.\d+", version)


def test_importing_cudart_does_not_import_cuda_bindings():
    # The fingerprint stage runs on every dvc repro; cuda.bindings costs ~80 ms to import.
    code = "import sys, pipeline.machine.cudart, pipeline.bench.cuda_timing; print('cuda.bindings' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_the_runtime_is_named_alike_before_and_after_this_process_maps_it():
    """A stage that builds in the test process found libcudart by its soname; the same call
    after TensorRT had mapped it named the mapped path: one machine, two records."""
    code = (
        "import ctypes, json\n"
        "from pipeline.machine import shared_runtime\n"
        "before = shared_runtime.cuda_runtime()\n"
        "if before[0] is not None:\n"
        "    ctypes.CDLL(before[1].split(' of ', 1)[1])\n"
        "print(json.dumps([before, shared_runtime.cuda_runtime()]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = json.loads(r.stdout)
    assert before == after
