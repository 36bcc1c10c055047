"""Running an engine: whether it can run here, and if so with TensorRT's documented
runtime API (deserialize, execution context, set_input_shape, set_tensor_address,
execute_async_v3, IProfiler) over buffers and a stream from pipeline.machine.cudart, timed
by pipeline.bench.cuda_timing like trtexec: copies and compute as separate stages,
optionally the compute replayed from a CUDA graph, per-layer times in a separate
profiling pass so the profiler does not slow the timed run."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.bench import cuda_timing, measure_loop
from pipeline.bench.runner import (
    Feeds,
    LayerRow,
    Notes,
    Runner,
    TimingJob,
)
from pipeline.core.errors import PipelineError
from pipeline.engine import backend
from pipeline.machine.cudart import D2H, H2D, Cuda

if TYPE_CHECKING:
    from pipeline.bench.generation import Steps
    from pipeline.graph.onnx_model import TensorSpec
    from pipeline.inputs.profiles import Profile


class EngineRunner(Runner):
    device = "cuda"

    def __init__(self, engine_path: Path, flavour: str, refit_onnx: Path | None = None) -> None:
        self.trt = trt = backend.import_flavour(flavour)
        self.cuda = Cuda.get()
        self.stream = self.cuda.stream()
        self._closed = False  # the stream (an int handle) is destroyed once closed
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime, self.engine = backend.deserialize(trt, self._logger, engine_path)
        if refit_onnx is not None:  # a weight-stripped engine (build.strip_weights)
            backend.refit_from_onnx(trt, self.engine, self._logger, refit_onnx)
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if n not in self.inputs]
        self._held: list[
            tuple[str, int]
        ] = []  # (cudart release call, handle) for the current shapes
        self.host: dict[str, np.ndarray] = {}
        self.device_buffers: dict[str, int] = {}
        self.label = f"{trt.__name__} {trt.__version__} engine"

    def _release(self) -> None:
        self.cuda.sync(self.stream)
        for release, handle in reversed(self._held):
            self.cuda.release(release, handle)
        self._held, self.host, self.device_buffers = [], {}, {}

    def prepare(self, feeds: Feeds, profile_index: int) -> None:
        """Select the profile, set input shapes, give every I/O tensor a device buffer
        and a pinned host buffer, and fill the host inputs."""
        self._release()
        if not self.context.set_optimization_profile_async(profile_index, self.stream):
            raise PipelineError(f"the engine has no optimization profile {profile_index}")
        self.cuda.sync(self.stream)
        for name in self.inputs:
            if not self.context.set_input_shape(name, tuple(feeds[name].shape)):
                raise PipelineError(
                    f"engine rejects shape {list(feeds[name].shape)} for input '{name}'"
                )
        for name in self.inputs + self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise PipelineError(
                    f"output '{name}' has a data-dependent shape {list(shape)}; not supported here"
                )
            try:
                dtype = np.dtype(self.trt.nptype(self.engine.get_tensor_dtype(name)))
            except TypeError:
                raise PipelineError(
                    f"tensor '{name}' has type {self.engine.get_tensor_dtype(name)}, "
                    "which numpy cannot hold; keep fp32 I/O (precision.keep_io_types)"
                ) from None
            self.device_buffers[name] = self.cuda.malloc(int(np.prod(shape)) * dtype.itemsize)
            self._held.append(("cudaFree", self.device_buffers[name]))
            host_ptr, self.host[name] = self.cuda.pinned_array(shape, dtype)
            self._held.append(("cudaFreeHost", host_ptr))
            self.context.set_tensor_address(name, self.device_buffers[name])
        for name in self.inputs:
            np.copyto(self.host[name], feeds[name].astype(self.host[name].dtype, copy=False))

    def h2d(self) -> None:
        for name in self.inputs:
            self.cuda.memcpy_async(
                self.device_buffers[name],
                self.host[name].ctypes.data,
                self.host[name].nbytes,
                H2D,
                self.stream,
            )

    def compute(self) -> None:
        if not self.context.execute_async_v3(self.stream):
            raise PipelineError("TensorRT execute_async_v3 failed (see the TensorRT log above)")

    def d2h(self) -> None:
        for name in self.outputs:
            self.cuda.memcpy_async(
                self.host[name].ctypes.data,
                self.device_buffers[name],
                self.host[name].nbytes,
                D2H,
                self.stream,
            )

    def hold(self, release: str, handle: int) -> None:
        """Release `handle` with cudart's `release` call when the buffers go (close, or
        the next prepare)."""
        self._held.append((release, handle))

    def generation_steps(self, specs: list[TensorSpec], profiles: list[Profile]) -> Steps:
        """A greedy generation's steps with the KV cache kept on the device."""
        from pipeline.bench.trt_generation import DeviceSteps

        self._release()
        return DeviceSteps(self, specs, profiles)

    def infer(self, feeds: Feeds, profile_index: int = 0) -> dict[str, np.ndarray]:
        self.prepare(feeds, profile_index)
        self.h2d()
        self.compute()
        self.d2h()
        self.cuda.sync(self.stream)
        return {name: self.host[name].copy() for name in self.outputs}

    def _graph_compute(self) -> tuple[Callable[[], None], str | None]:
        """The compute stage as a CUDA graph launch, or (plain enqueue, why not)."""
        capturable = getattr(self.context, "is_stream_capturable", None)
        if capturable is not None and not capturable(self.stream):
            return self.compute, "the execution context is not stream capturable"
        # TensorRT does deferred work on the first enqueue after a shape change; keep it out of the graph.
        self.compute()
        self.cuda.sync(self.stream)
        try:
            graph, graph_exec = self.cuda.capture(self.stream, self.compute)
        except PipelineError as e:
            return self.compute, f"capture failed: {e}"
        self._held += [("cudaGraphDestroy", graph), ("cudaGraphExecDestroy", graph_exec)]
        return (lambda: self.cuda.launch(graph_exec, self.stream)), None

    def time(self, job: TimingJob) -> tuple[dict[str, np.ndarray], Notes]:
        """(times, notes): per-iteration host and per-stage GPU milliseconds."""
        bench_cfg = job.settings
        self.prepare(job.feeds, job.profile_index)
        self.h2d()
        notes: Notes = {
            "device_copies": bool(bench_cfg.device_copies),
            "cuda_graph": False,
        }
        compute = self.compute
        if bench_cfg.cuda_graph:
            compute, why = self._graph_compute()
            notes["cuda_graph"] = why is None
            if why:
                notes["cuda_graph_fallback"] = why
        stages = [("compute", compute)]
        if bench_cfg.device_copies:
            stages = [("h2d", self.h2d), *stages, ("d2h", self.d2h)]
        times = cuda_timing.measure(
            stages,
            self.stream,
            measure_loop.Budget.of(bench_cfg),
            job.progress,
            self.cuda,
        )
        return times, notes

    def layer_times(
        self, feeds: Feeds, profile_index: int, iterations: int, top: int
    ) -> list[LayerRow]:
        """Mean time per layer over `iterations` profiled runs, the `top` slowest
        first. Layer names are only as good as the engine's profiling verbosity."""
        # TensorRT ships no type information: a class of the flavour's, known at run time.
        trt: Any = self.trt

        class LayerTimes(trt.IProfiler):  # type: ignore[misc]  # subclassing Any: see above
            def __init__(self) -> None:
                trt.IProfiler.__init__(self)
                self.total: dict[str, float] = defaultdict(float)

            def report_layer_time(self, layer_name: str, ms: float) -> None:
                self.total[layer_name] += ms

        self.prepare(feeds, profile_index)
        self.h2d()
        profiler = LayerTimes()
        self.context.profiler = profiler
        iterations = max(int(iterations), 1)
        for _ in range(iterations):
            self.compute()
            self.cuda.sync(self.stream)
        whole = sum(profiler.total.values()) or 1.0
        rows = sorted(profiler.total.items(), key=lambda kv: -kv[1])[: max(int(top), 0)]
        return [
            {
                "layer": name,
                "mean_ms": round(ms / iterations, 6),
                "percent": round(100 * ms / whole, 2),
            }
            for name, ms in rows
        ]

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._release()
        finally:
            self.context = self.engine = None
            self.cuda.release("cudaStreamDestroy", self.stream)
            self._closed = True
