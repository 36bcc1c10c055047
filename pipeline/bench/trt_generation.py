"""Greedy generation on a TensorRT engine with the KV cache kept on the device: two device
buffers per cache tensor, each as long as the engine's profiles allow; a step reads its
past from one and writes its `present` into the other, and the next step swaps them, so
the cache never crosses to the host and is never copied. Per step only the new tokens,
the mask and the positions go up (pinned host buffers) and the last position's logits
come down. Each phase runs in its own profile (`prefill`, `decode`), selected when the
phase changes.

Written against TensorRT's runtime API (set_optimization_profile_async, set_input_shape,
set_tensor_address, execute_async_v3) and pipeline.machine.cudart; it needs a GPU and a
TensorRT that loads the engine, and its test is marked `gpu`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pipeline.bench import decoder_bench
from pipeline.core.errors import PipelineError
from pipeline.inputs import decoder_runs
from pipeline.inputs.decoder_profiles import kv_dims, kv_inputs
from pipeline.machine.cudart import D2H, H2D

if TYPE_CHECKING:
    from types import ModuleType

    from pipeline.graph.onnx_model import TensorSpec
    from pipeline.inputs.profiles import Profile
    from pipeline.machine.cudart import Cuda


class Engine(Protocol):
    """What the steps read of bench/trt_runner.EngineRunner (not imported: it imports
    this module for its generation_steps)."""

    trt: ModuleType
    engine: Any
    context: Any
    cuda: Cuda
    stream: int
    inputs: list[str]
    outputs: list[str]

    def hold(self, release: str, handle: int) -> None: ...


class DeviceSteps:
    """generation.Steps on an engine: the cache in swapped device buffers."""

    def __init__(self, runner: Engine, specs: list[TensorSpec], profiles: list[Profile]):
        self.r, self.specs, self.profiles = runner, specs, profiles
        engine = runner.engine
        self.kv = [t.name for t in kv_inputs(specs)]
        self.present = decoder_runs.present_outputs(self.specs, runner.outputs)
        self.capacity: dict[str, int] = {}  # name -> bytes of its device buffer
        self.buffers: dict[str, int] = {}
        self.spare: dict[str, int] = {}  # each cache tensor's other buffer
        self.dtypes = {
            n: np.dtype(runner.trt.nptype(engine.get_tensor_dtype(n)))
            for n in runner.inputs + runner.outputs
        }
        self.logits = decoder_runs.LOGITS if decoder_runs.LOGITS in runner.outputs else None
        if self.logits is None:
            raise PipelineError("generation on the engine reads its `logits` output")
        for name in self.kv:  # the cache at its longest, twice
            self._buffer(name, self._largest(name))
            self.spare[name] = runner.cuda.malloc(self.capacity[name])
            runner.hold("cudaFree", self.spare[name])
        self.profile = -1
        self.done = 0
        self.host: np.ndarray | None = None  # the last logits' pinned buffer

    def start(self, ids: np.ndarray) -> np.ndarray:
        self.done = 0
        return self._run(ids)

    def step(self, ids: np.ndarray) -> np.ndarray:
        return self._run(ids)

    def _run(self, ids: np.ndarray) -> np.ndarray:
        r, batch, new = self.r, ids.shape[0], ids.shape[1]
        tokens = decoder_runs.token_feeds(self.specs, ids, self.done)
        shapes = {n: list(a.shape) for n, a in tokens.items()}
        for t in kv_inputs(self.specs):
            heads, size = kv_dims(t, "generation on the engine cannot size it")
            shapes[t.name] = [batch, heads, self.done, size]
        self._select(shapes, "decode" if self.done else "prefill")
        for name, shape in shapes.items():
            if not r.context.set_input_shape(name, tuple(shape)):
                raise PipelineError(f"engine rejects shape {shape} for input '{name}'")
        for name, array in tokens.items():  # the small inputs go up
            host = np.ascontiguousarray(array, dtype=self.dtypes[name])
            pointer = self._buffer(name, host.nbytes)
            r.cuda.memcpy_async(pointer, host.ctypes.data, host.nbytes, H2D, r.stream)
            r.context.set_tensor_address(name, pointer)
        for name in self.kv:  # past from one buffer, present into the other
            r.context.set_tensor_address(name, self.buffers[name])
            r.context.set_tensor_address(self.present[name], self.spare[name])
        for name in r.outputs:
            if name not in self.present.values():
                dims = tuple(r.context.get_tensor_shape(name))
                nbytes = int(np.prod(dims)) * self.dtypes[name].itemsize
                r.context.set_tensor_address(name, self._buffer(name, nbytes))
        if not r.context.execute_async_v3(r.stream):
            raise PipelineError("TensorRT execute_async_v3 failed (see the TensorRT log above)")
        host = self._last_logits(batch, new)
        r.cuda.sync(r.stream)
        for name in self.kv:
            self.buffers[name], self.spare[name] = self.spare[name], self.buffers[name]
        self.done += new
        return host[:batch].copy()

    def _last_logits(self, batch: int, new: int) -> np.ndarray:
        """Each sequence's last row of logits, copied down on the stream into one pinned
        buffer (read once the stream is synchronized)."""
        r, name = self.r, str(self.logits)
        vocab = int(r.context.get_tensor_shape(name)[-1])
        dtype = self.dtypes[name]
        if self.host is None or self.host.shape[0] < batch or self.host.shape[1] != vocab:
            pointer, self.host = r.cuda.pinned_array((batch, vocab), dtype)
            r.hold("cudaFreeHost", pointer)
        row = vocab * dtype.itemsize
        for i in range(batch):
            src = self.buffers[name] + ((i * new) + new - 1) * row
            r.cuda.memcpy_async(self.host[i].ctypes.data, src, row, D2H, r.stream)
        return self.host

    def _select(self, shapes: dict[str, list[int]], phase: str) -> None:
        feeds = {n: np.broadcast_to(np.zeros((), np.int8), s) for n, s in shapes.items()}
        index = decoder_bench.profile_index(feeds, self.profiles, phase)
        if index != self.profile:
            if not self.r.context.set_optimization_profile_async(index, self.r.stream):
                raise PipelineError(f"the engine has no optimization profile {index}")
            self.profile = index

    def _largest(self, name: str) -> int:
        """Bytes of a cache tensor at the profiles' largest batch and past, one step longer."""
        batch, heads, past, size = max(
            (p["inputs"][name]["max"] for p in self.profiles), key=lambda s: s[0] * s[2]
        )
        return int(batch * heads * (past + 1) * size) * int(self.dtypes[name].itemsize)

    def _buffer(self, name: str, nbytes: int) -> int:
        """`name`'s device buffer, grown (never shrunk) to hold `nbytes`."""
        if self.capacity.get(name, -1) < nbytes:
            pointer = self.r.cuda.malloc(max(nbytes, 1))
            self.r.hold("cudaFree", pointer)
            self.buffers[name], self.capacity[name] = pointer, nbytes
        return self.buffers[name]
