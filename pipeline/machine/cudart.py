"""The few CUDA runtime calls GPU timing needs (streams, events, copies, pinned
memory, graphs), through NVIDIA's cuda-python (`cuda.bindings.runtime`), the binding
TensorRT's own samples use. The TensorRT runner and the torch runner time the GPU
with the same code; handles cross this module as plain ints, the form TensorRT
(`execute_async_v3`) and torch (`Stream.cuda_stream`) give and take.

cuda.bindings links its CUDA runtime statically (it needs no libcudart on the
machine, and answers cudaRuntimeGetVersion without a driver). It is imported on
first use, not here: its import costs about 80 ms, and the fingerprint stage,
which runs on every `dvc repro`, imports this module."""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PipelineError

if TYPE_CHECKING:  # numpy is imported where it is used: the fingerprint stage imports this module
    import numpy as np
    from numpy.typing import DTypeLike

H2D, D2H, D2D = 1, 2, 3  # cudaMemcpyKind
STREAM_NON_BLOCKING = 1
CAPTURE_MODE_THREAD_LOCAL = 1  # other threads may keep using CUDA during capture
HOST_ALLOC_DEFAULT = 0


def bindings_version() -> str | None:
    """The installed cuda-bindings distribution, from its metadata (no import)."""
    try:
        return md.version("cuda-bindings")
    except md.PackageNotFoundError:
        return None


class Cuda:
    """cuda.bindings.runtime, imported once; every failed call is a PipelineError
    naming the call and CUDA's error string."""

    _instance: Cuda | None = None

    def __init__(self) -> None:
        try:
            from cuda.bindings import runtime
        except ImportError as e:
            raise PipelineError(
                f"cuda-bindings is not importable ({e}); GPU timing needs it: "
                "pip install cuda-bindings"
            ) from None
        self.rt = runtime
        self.version = bindings_version()

    @classmethod
    def get(cls) -> Cuda:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def call(self, name: str, *args: object) -> Any:
        """The call's result without its error code: None, one value, or a tuple (as
        cuda.bindings, which ships no type information, gives them).
        Kept lean: event records and copies run inside the host-timed iteration."""
        out = getattr(self.rt, name)(*args)
        if out[0]:  # cudaError_t is an int enum and cudaSuccess is 0
            raise PipelineError(f"CUDA {name} failed: {self._describe(out[0])}")
        return None if len(out) == 1 else out[1] if len(out) == 2 else out[1:]

    def _describe(self, err: Any) -> str:  # a cudaError_t of cuda.bindings
        _, text = self.rt.cudaGetErrorString(err)
        text = text.decode() if isinstance(text, bytes) else str(text)
        return f"{text} ({getattr(err, 'name', err)} = {int(err)})"

    def _handle(self, name: str, *args: object) -> int:
        out = self.call(name, *args)
        return 0 if out is None else int(out)

    def runtime_version(self) -> str:
        """The runtime cuda.bindings links: needs no driver and no GPU."""
        v = int(self.call("cudaRuntimeGetVersion"))
        return f"{v // 1000}.{(v % 1000) // 10}"

    def device_count(self) -> int:
        return int(self.call("cudaGetDeviceCount"))

    def pci_bus_id(self, device: int = 0) -> str:
        raw = self.call("cudaDeviceGetPCIBusId", 32, device)
        # the binding hands back the whole 32-byte buffer: the id ends at the first NUL
        return (raw.decode() if isinstance(raw, bytes) else str(raw)).split("\x00", 1)[0].strip()

    def stream(self) -> int:
        return self._handle("cudaStreamCreateWithFlags", STREAM_NON_BLOCKING)

    def event(self) -> int:
        return self._handle("cudaEventCreate")

    def record(self, event: int, stream: int) -> None:
        self.call("cudaEventRecord", event, stream)

    def wait_event(self, event: int) -> None:
        self.call("cudaEventSynchronize", event)

    def elapsed_ms(self, start: int, end: int) -> float:
        return float(self.call("cudaEventElapsedTime", start, end))

    def malloc(self, nbytes: int) -> int:
        return self._handle("cudaMalloc", max(int(nbytes), 1))

    def host_alloc(self, nbytes: int) -> int:
        """Pinned host memory: the only kind an async copy really overlaps with."""
        return self._handle("cudaHostAlloc", max(int(nbytes), 1), HOST_ALLOC_DEFAULT)

    def pinned_array(self, shape: tuple[int, ...], dtype: DTypeLike) -> tuple[int, np.ndarray]:
        """(pointer, numpy array over it) of pinned host memory; free the pointer
        with release("cudaFreeHost", ...) once the array is no longer used."""
        import ctypes

        import numpy as np  # here, not at the top: the fingerprint stage imports this module

        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        ptr = self.host_alloc(count * dtype.itemsize)
        raw = (ctypes.c_byte * max(count * dtype.itemsize, 1)).from_address(ptr)
        # numpy's stub lists a few buffer types for frombuffer; a ctypes array is a buffer too.
        array: np.ndarray = np.frombuffer(raw, dtype=dtype, count=count)  # type: ignore[call-overload]
        return ptr, array.reshape(shape)

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        self.call("cudaMemcpyAsync", dst, src, int(nbytes), self.rt.cudaMemcpyKind(kind), stream)

    def capture(self, stream: int, enqueue: Callable[[], None]) -> tuple[int, int]:
        """(graph, graph exec) of what `enqueue()` puts on the stream."""
        self.call(
            "cudaStreamBeginCapture",
            stream,
            self.rt.cudaStreamCaptureMode(CAPTURE_MODE_THREAD_LOCAL),
        )
        try:
            enqueue()
        except BaseException:
            # Leave capture mode or the stream stays unusable; the enqueue's error is the one to see.
            self.rt.cudaStreamEndCapture(stream)
            raise
        graph = self._handle("cudaStreamEndCapture", stream)
        try:
            return graph, self._handle("cudaGraphInstantiate", graph, 0)
        except PipelineError:
            self.release("cudaGraphDestroy", graph)
            raise

    def launch(self, graph_exec: int, stream: int) -> None:
        self.call("cudaGraphLaunch", graph_exec, stream)

    def sync(self, stream: int) -> None:
        self.call("cudaStreamSynchronize", stream)

    def release(self, name: str, handle: int) -> None:
        """Teardown (cudaFree, cudaEventDestroy, ...) that never hides the error
        which led to it."""
        if handle:
            getattr(self.rt, name)(handle)
