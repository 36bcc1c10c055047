"""pipeline.machine.cudart on any machine: cuda.bindings answers what needs no
driver, and a call that fails is one PipelineError line naming the call and CUDA's
own words. The calls that need a GPU are exercised by tests/test_benchmark_gpu.py
and benchmarks/gpu_check.py."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pipeline.core.errors import PipelineError
from pipeline.machine import cudart, fingerprint
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
    assert msg.startswith("CUDA cudaDeviceGetPCIBusId failed: ") and re.search(r"\(cudaError\w+ = \d+\)$", msg)


def test_fingerprint_says_which_runtime_and_where_it_was_read():
    version, source = fingerprint.cuda_runtime()
    assert version == Cuda.get().runtime_version()
    assert source == f"cudaRuntimeGetVersion through cuda-bindings {cudart.bindings_version()}"


def test_importing_cudart_does_not_import_cuda_bindings():
    # The fingerprint stage runs on every dvc repro; cuda.bindings costs ~80 ms to import.
    code = "import sys, pipeline.machine.cudart, pipeline.bench.cuda_timing; print('cuda.bindings' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_fingerprint_without_cuda_bindings_is_none_with_the_reason():
    # Blocking the import stands in for a machine where the package is absent; no CUDA call is faked.
    code = ("import sys; sys.modules['cuda.bindings'] = None\n"
            "from pipeline.machine import fingerprint\n"
            "from pipeline.core.config import BuildConfig\n"
            "fp = fingerprint.collect(BuildConfig(), require_trt=False)\n"
            "print(fp['cuda_runtime_version']); print(fp['cuda_runtime_source'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    version, source = r.stdout.strip().splitlines()
    assert version == "None" and source.startswith("cuda-bindings is not importable")


def test_without_a_driver_every_call_reaches_cuda_and_fails_as_one_line():
    # Arguments are converted by cuda.bindings before CUDA runs: a wrong type would be a
    # TypeError here, not CUDA's "insufficient driver". Handles are dummies, so never on a GPU.
    cuda = Cuda.get()
    err, _ = cuda.rt.cudaGetDeviceCount()
    if err != cuda.rt.cudaError_t.cudaErrorInsufficientDriver:
        pytest.skip(f"cudaGetDeviceCount gives {err.name}: a driver is present, tests/test_benchmark_gpu.py "
                    "makes these calls for real")
    calls = {
        "cudaGetDeviceCount": cuda.device_count,
        "cudaStreamCreateWithFlags": cuda.stream,
        "cudaEventCreate": cuda.event,
        "cudaEventRecord": lambda: cuda.record(1, 2),
        "cudaEventSynchronize": lambda: cuda.wait_event(1),
        "cudaEventElapsedTime": lambda: cuda.elapsed_ms(1, 2),
        "cudaMalloc": lambda: cuda.malloc(64),
        "cudaHostAlloc": lambda: cuda.pinned_array((4, 4), "float32"),
        "cudaMemcpyAsync": lambda: cuda.memcpy_async(1, 2, 64, cudart.D2H, 3),
        "cudaStreamBeginCapture": lambda: cuda.capture(1, lambda: None),
        "cudaGraphLaunch": lambda: cuda.launch(1, 2),
        "cudaStreamSynchronize": lambda: cuda.sync(1),
    }
    for name, call in calls.items():
        with pytest.raises(PipelineError) as e:
            call()
        assert str(e.value) == (f"CUDA {name} failed: CUDA driver version is insufficient for CUDA runtime "
                                "version (cudaErrorInsufficientDriver = 35)")
    cuda.release("cudaFree", 1)  # teardown swallows the error: it must not hide the one that led to it
