"""PyTorch eager for models that come from models/: built by the same factory with
the same seed as the export, so its weights are the ONNX graph's. CPU here, CUDA
where torch sees a GPU; on CUDA it is timed by pipeline.bench.cuda_timing, the same
event code the TensorRT runner uses, with copies through pipeline.machine.cudart.
A model has no optimization profiles: infer and time take profile_index for the
runner contract and ignore it."""

from __future__ import annotations

import importlib.util
from typing import Any, Protocol

import numpy as np

from pipeline.bench import cuda_timing, measure_loop
from pipeline.bench.runner import Feeds, Notes, Progress, Runner, TimingJob
from pipeline.core.errors import PipelineError
from pipeline.core.threads import intra_op
from pipeline.inputs import sample_data
from pipeline.machine.cudart import D2H, H2D, Cuda


class TorchModel(Protocol):
    """What the torch runner reads of the model group (config.ModelConfig)."""

    @property
    def factory(self) -> str | None: ...
    @property
    def seed(self) -> int: ...


def why_not(model_cfg: TorchModel) -> str | None:
    if not model_cfg.factory:
        return (
            "the model is an ONNX file, not a factory (model.factory): "
            "there is no PyTorch module to run"
        )
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    return None


def resolve_device(requested: str) -> str:
    import torch

    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise PipelineError("benchmark.device=cuda but torch sees no CUDA GPU")
    return "cuda" if has_cuda and requested != "cpu" else "cpu"


def _as_tuple(result: Any) -> tuple[Any, ...]:  # torch tensors
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


class TorchRunner(Runner):
    def __init__(
        self, model_cfg: TorchModel, device: str = "cpu", threads: int = 0, tf32: bool = False
    ) -> None:
        import torch

        self.torch = torch
        assert model_cfg.factory, "a torch runner needs model.factory (see why_not)"
        module = sample_data.load_factory(model_cfg.factory)
        self.input_names, self.output_names = list(module.INPUT_NAMES), list(module.OUTPUT_NAMES)
        self.torch_device = torch.device(device)
        self.device = self.torch_device.type
        threads = intra_op(threads)[0]
        if threads:
            torch.set_num_threads(threads)
        if self.device == "cuda":
            # cuDNN convolutions default to TF32; fp32 must mean fp32 unless the precision says tf32.
            torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
            torch.backends.cudnn.allow_tf32 = bool(tf32)
        self.tf32 = bool(tf32) and self.device == "cuda"
        self.net = module.build(int(model_cfg.seed)).eval().to(self.torch_device)
        self.last_outputs: dict[str, np.ndarray] = {}
        where = torch.cuda.get_device_name(self.torch_device) if self.device == "cuda" else "CPU"
        self.label = (
            f"PyTorch {torch.__version__} eager fp32{' (TF32 on)' if self.tf32 else ''}, {where}"
        )

    def _args(self, feeds: Feeds) -> tuple[Any, ...]:  # torch tensors
        return tuple(
            self.torch.from_numpy(np.ascontiguousarray(feeds[n])).to(self.torch_device)
            for n in self.input_names
        )

    def _named(self, tensors: tuple[Any, ...]) -> dict[str, np.ndarray]:
        return {n: t.detach().cpu().numpy() for n, t in zip(self.output_names, tensors)}

    def infer(self, feeds: Feeds, profile_index: int = 0) -> dict[str, np.ndarray]:
        with self.torch.inference_mode():
            return self._named(_as_tuple(self.net(*self._args(feeds))))

    def time(self, job: TimingJob) -> tuple[dict[str, np.ndarray], Notes]:
        """{"host": ms} on the CPU; on CUDA also the GPU time of each stage, with copies
        and CUDA graph replay as the settings' device_copies / cuda_graph say."""
        cfg = job.settings
        if self.device == "cuda":
            copies, graph = bool(cfg.device_copies), bool(cfg.cuda_graph)
            times = self._time_cuda(job.feeds, cfg, job.progress, copies, graph)
            return times, {"device_copies": copies, "cuda_graph": graph}
        net, args, budget = self.net, self._args(job.feeds), measure_loop.Budget.of(cfg)
        with self.torch.inference_mode():
            host = measure_loop.measure(lambda: net(*args), budget, job.progress)
        return {"host": host}, {}

    def _time_cuda(
        self,
        feeds: Feeds,
        cfg: measure_loop.BudgetSettings,
        progress: Progress | None,
        copies: bool,
        cuda_graph: bool,
    ) -> dict[str, np.ndarray]:
        torch, cuda = self.torch, Cuda.get()
        stream = torch.cuda.Stream(self.torch_device)
        handle = stream.cuda_stream
        host_in = [
            torch.from_numpy(np.ascontiguousarray(feeds[n])).pin_memory() for n in self.input_names
        ]
        dev_in = [torch.empty_like(h, device=self.torch_device) for h in host_in]
        held: dict[str, tuple[Any, ...]] = {}  # the outputs (torch tensors) of the last compute
        with torch.inference_mode(), torch.cuda.stream(stream):
            for h, d in zip(host_in, dev_in):
                d.copy_(h)

            def h2d() -> None:
                for h, d in zip(host_in, dev_in):
                    cuda.memcpy_async(d.data_ptr(), h.data_ptr(), h.nbytes, H2D, handle)

            def compute() -> None:
                held["out"] = tuple(t.contiguous() for t in _as_tuple(self.net(*dev_in)))

            compute()  # cuDNN picks its algorithms and the allocator fills before anything is timed
            stream.synchronize()
            if cuda_graph:
                # torch's own capture: its allocator must know which blocks the graph owns.
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    static = tuple(t.contiguous() for t in _as_tuple(self.net(*dev_in)))
                held["out"] = static
                compute = graph.replay
            host_out = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in held["out"]]

            def d2h() -> None:
                for t, h in zip(held["out"], host_out):
                    cuda.memcpy_async(h.data_ptr(), t.data_ptr(), t.nbytes, D2H, handle)

            stages = (
                ([("h2d", h2d)] if copies else [])
                + [("compute", compute)]
                + ([("d2h", d2h)] if copies else [])
            )
            times = cuda_timing.measure(stages, handle, measure_loop.Budget.of(cfg), progress, cuda)
            if not copies:
                d2h()
            stream.synchronize()
        self.last_outputs = {n: h.numpy().copy() for n, h in zip(self.output_names, host_out)}
        return times
