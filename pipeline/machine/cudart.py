"""The few CUDA runtime calls GPU timing needs (streams, events, copies, pinned
memory, graphs) through ctypes over a libcudart this process already has or can
find. No torch, cuda-python or pycuda, so the TensorRT runner and the torch runner
time the GPU with the same code, and importing this needs no GPU."""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from typing import Iterator

from pipeline.core.errors import PipelineError

H2D, D2H, D2D = 1, 2, 3  # cudaMemcpyKind
STREAM_NON_BLOCKING = 1
CAPTURE_MODE_THREAD_LOCAL = 1  # other threads may keep using CUDA during capture

_c = ctypes
_void_pp = _c.POINTER(_c.c_void_p)
# name -> argtypes; every call returns cudaError_t (int)
_SIGNATURES = {
    "cudaGetDeviceCount": [_c.POINTER(_c.c_int)],
    "cudaRuntimeGetVersion": [_c.POINTER(_c.c_int)],
    "cudaDeviceGetPCIBusId": [_c.c_char_p, _c.c_int, _c.c_int],
    "cudaStreamCreateWithFlags": [_void_pp, _c.c_uint],
    "cudaStreamDestroy": [_c.c_void_p],
    "cudaStreamSynchronize": [_c.c_void_p],
    "cudaEventCreate": [_void_pp],
    "cudaEventDestroy": [_c.c_void_p],
    "cudaEventRecord": [_c.c_void_p, _c.c_void_p],
    "cudaEventSynchronize": [_c.c_void_p],
    "cudaEventElapsedTime": [_c.POINTER(_c.c_float), _c.c_void_p, _c.c_void_p],
    "cudaMalloc": [_void_pp, _c.c_size_t],
    "cudaFree": [_c.c_void_p],
    "cudaHostAlloc": [_void_pp, _c.c_size_t, _c.c_uint],
    "cudaFreeHost": [_c.c_void_p],
    "cudaMemcpyAsync": [_c.c_void_p, _c.c_void_p, _c.c_size_t, _c.c_int, _c.c_void_p],
    "cudaStreamBeginCapture": [_c.c_void_p, _c.c_int],
    "cudaStreamEndCapture": [_c.c_void_p, _void_pp],
    "cudaGraphInstantiateWithFlags": [_void_pp, _c.c_void_p, _c.c_ulonglong],
    "cudaGraphLaunch": [_c.c_void_p, _c.c_void_p],
    "cudaGraphExecDestroy": [_c.c_void_p],
    "cudaGraphDestroy": [_c.c_void_p],
}


def _candidates() -> Iterator[str]:
    # One already mapped (by torch or TensorRT) first: then there is one runtime in
    # the process, not two that each keep their own state.
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if os.path.basename(path).startswith("libcudart.so"):
                    yield path
    except OSError:
        pass
    for site in sys.path:  # pip's nvidia-cuda-runtime wheels
        yield from sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libcudart.so*")), reverse=True)
    yield from ("libcudart.so", "libcudart.so.13", "libcudart.so.12")


class Cuda:
    """libcudart, loaded once; every failed call is a PipelineError naming the call."""

    _instance: "Cuda | None" = None

    def __init__(self) -> None:
        self.lib = None
        tried = []
        for path in _candidates():
            try:
                self.lib = ctypes.CDLL(path)
                self.path = path
                break
            except OSError:
                tried.append(path)
        if self.lib is None:
            raise PipelineError("no CUDA runtime (libcudart) found; GPU timing needs one")
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(self.lib, name, None)
            if fn is None:
                raise PipelineError(f"{self.path} lacks {name}; GPU timing needs CUDA 11.4 or newer")
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        self.lib.cudaGetErrorString.argtypes, self.lib.cudaGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p

    @classmethod
    def get(cls) -> "Cuda":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def call(self, name: str, *args) -> None:
        err = getattr(self.lib, name)(*args)
        if err:
            msg = self.lib.cudaGetErrorString(err).decode()
            raise PipelineError(f"CUDA {name} failed: {msg} (error {err})")

    def _out(self, name: str, *args) -> int:
        handle = ctypes.c_void_p()
        self.call(name, ctypes.byref(handle), *args)
        return handle.value or 0

    def runtime_version(self) -> str:
        v = ctypes.c_int()
        self.call("cudaRuntimeGetVersion", ctypes.byref(v))
        return f"{v.value // 1000}.{(v.value % 1000) // 10}"

    def device_count(self) -> int:
        n = ctypes.c_int()
        self.call("cudaGetDeviceCount", ctypes.byref(n))
        return n.value

    def pci_bus_id(self, device: int = 0) -> str:
        buf = ctypes.create_string_buffer(32)
        self.call("cudaDeviceGetPCIBusId", buf, 32, device)
        return buf.value.decode()

    def stream(self) -> int:
        return self._out("cudaStreamCreateWithFlags", STREAM_NON_BLOCKING)

    def event(self) -> int:
        return self._out("cudaEventCreate")

    def record(self, event: int, stream: int) -> None:
        self.call("cudaEventRecord", event, stream)

    def elapsed_ms(self, start: int, end: int) -> float:
        ms = ctypes.c_float()
        self.call("cudaEventElapsedTime", ctypes.byref(ms), start, end)
        return float(ms.value)

    def malloc(self, nbytes: int) -> int:
        return self._out("cudaMalloc", max(int(nbytes), 1))

    def host_alloc(self, nbytes: int) -> int:
        """Pinned host memory: the only kind an async copy really overlaps with."""
        return self._out("cudaHostAlloc", max(int(nbytes), 1), 0)

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        self.call("cudaMemcpyAsync", dst, src, int(nbytes), kind, stream)

    def capture(self, stream: int, enqueue) -> tuple[int, int]:
        """(graph, graph exec) of what `enqueue()` puts on the stream."""
        self.call("cudaStreamBeginCapture", stream, CAPTURE_MODE_THREAD_LOCAL)
        graph = ctypes.c_void_p()
        try:
            enqueue()
        finally:  # always leave capture mode, or the stream stays unusable
            self.call("cudaStreamEndCapture", stream, ctypes.byref(graph))
        try:
            return graph.value, self._out("cudaGraphInstantiateWithFlags", graph.value, 0)
        except PipelineError:
            self.release("cudaGraphDestroy", graph.value)
            raise

    def launch(self, graph_exec: int, stream: int) -> None:
        self.call("cudaGraphLaunch", graph_exec, stream)

    def sync(self, stream: int) -> None:
        self.call("cudaStreamSynchronize", stream)

    def release(self, name: str, handle: int) -> None:
        """Teardown (cudaFree, cudaEventDestroy, ...) that never hides the error
        which led to it."""
        if handle:
            getattr(self.lib, name)(handle)
