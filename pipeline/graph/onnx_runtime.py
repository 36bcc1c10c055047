"""The one way this tool runs ONNX Runtime: sessions for the benchmark, and the runs every
accuracy figure comes from, from a file, from bytes, or from an in-memory graph whose
weights live in external-data files beside its source."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import PipelineError, first_line
from pipeline.core.threads import intra_op

if TYPE_CHECKING:
    from onnx import ModelProto


@dataclass(frozen=True)
class GraphBytes:
    """A serialized graph whose external-data files are in `external_dir`: ONNX Runtime
    reads them there (its session option for graphs loaded from memory), so a graph read
    without its weights runs with them and nothing is copied or linked."""

    data: bytes = field(repr=False)  # a log line or an error message names it, not its bytes
    external_dir: Path | None = None


Graph = Path | bytes | GraphBytes


# Basic-level fusions that fold a BatchNormalization, Add or Mul after a Conv into its
# constant weights. In a Q/DQ graph they rescale weights already on the int8 grid, so the
# values requantized downstream move (PP layout detector, int8: 0.25 on an output); in the
# search's switchboards a Where in front of each weight blocks them. Left out, the graph
# written and the graph the search measured give the same figures (0.0456 both, where
# the written one measured 0.0460 with them).
VALUE_CHANGING_FUSIONS = ("ConvBNFusion", "ConvAddFusion", "ConvMulFusion")


def ort_session(
    path: Graph,
    threads: int = 0,
    providers: tuple[str, ...] = ("CPUExecutionProvider",),
    basic_optimizations: bool = False,
    fold_constants: bool = True,
) -> Any:  # an onnxruntime InferenceSession (onnxruntime ships no type information)
    """The one way this tool opens an ONNX Runtime session, from a file or a serialized
    graph (bytes). basic_optimizations keeps Q/DQ simulated in float: the extended
    optimizations fuse Q/DQ into integer kernels that have no fp8 variant on the CPU
    (QLinearConv rejects float8); and it leaves out the basic fusions that change values
    (VALUE_CHANGING_FUSIONS), so that every accuracy figure is the graph's own.
    fold_constants=False keeps constant subgraphs as nodes
    (a narrow weight's DequantizeLinear runs each call instead of becoming an fp32 copy)
    and gives what they make back after each call."""
    import onnxruntime as ort

    from pipeline.core import memory

    memory.free_heap_returned()  # before the session's weights land on top of what is free
    opts = ort.SessionOptions()
    # 4: fatal only. A failed run is caught and said in one line; ORT would print it too.
    opts.log_severity_level = 4
    if threads := threads or intra_op()[0]:  # a job's share of the cores (pipeline/core/threads.py)
        opts.intra_op_num_threads = threads
    if basic_optimizations:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        # These sessions run batches of many shapes (a decoder's every prompt and past
        # length): ONNX Runtime keeps a memory pattern per shape, each a block of the arena
        # of its own size. Without them the arena reuses its blocks: on the 653 MB decoder's
        # switchboard, 1,632 MiB peak against 1,247 MiB, 0.66 s a run against 0.58 s.
        opts.enable_mem_pattern = False
    if not fold_constants:  # constant folding would store each folded result in fp32
        opts.add_session_config_entry(
            "optimization.disable_specified_optimizers", "ConstantFolding"
        )
        # what is computed from the constants each run is freed each run, not kept in an
        # arena sized for every widened weight at once
        opts.enable_cpu_mem_arena = False
        opts.enable_mem_pattern = False
    source: bytes | str
    if isinstance(path, GraphBytes):  # never str() of it: the repr of every byte it holds
        source = path.data
        if path.external_dir is not None:
            opts.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", str(path.external_dir)
            )
    else:
        source = path if isinstance(path, bytes) else str(path)
    disabled = list(VALUE_CHANGING_FUSIONS) if basic_optimizations else []
    try:
        return ort.InferenceSession(
            source, opts, providers=list(providers), disabled_optimizers=disabled
        )
    except Exception as e:
        raise PipelineError(f"ONNX Runtime cannot load {_name(path)}: {first_line(e)}") from None


def _name(path: Graph) -> str:
    return "an in-memory graph" if isinstance(path, (bytes, GraphBytes)) else str(path)


def run_batches(
    path: Graph,
    batches: list[dict[str, np.ndarray]],
    extra: dict[str, np.ndarray] | None = None,
) -> list[dict[str, np.ndarray]]:
    """Outputs for each batch of feeds, from one session. Every accuracy figure comes from
    these settings (the fp32 reference, transformed graphs, the fallback search): basic
    graph optimizations only, so a graph left equal to the fp32 one gives its outputs bit
    for bit, and Q/DQ stay simulated in float rather than fused into integer kernels."""
    session = ort_session(path, basic_optimizations=True)
    return run_session(session, batches, _name(path), extra)


def run_session(
    session: Any,
    batches: list[dict[str, np.ndarray]],
    what: str,
    extra: dict[str, np.ndarray] | None = None,
) -> list[dict[str, np.ndarray]]:
    """Outputs for each batch of feeds (plus `extra` feeds, the same for every batch)."""
    names = [o.name for o in session.get_outputs()]
    outs: list[dict[str, np.ndarray]] = []
    for feeds in batches:
        try:
            outs.append(dict(zip(names, session.run(names, {**feeds, **(extra or {})}))))
        except Exception as e:
            raise PipelineError(
                f"ONNX Runtime failed to run {Path(what).name}: {first_line(e)}"
            ) from None
    return outs


@contextlib.contextmanager
def model_file(
    model: ModelProto, base: Path | None = None, consume: bool = False
) -> Iterator[Graph]:
    """Something ort_session opens for an in-memory graph: its bytes, with the folder of
    the external-data files it names (`base`); past the inline limit of weights held in
    memory (a rewritten graph; a protobuf message cannot exceed 2 GB) a temporary folder
    holding the graph with one data file of its own: those weights and the ones it names in `base`,
    copied one tensor at a time (ONNX Runtime refuses data reached through a link).
    `consume`: the caller is done with `model`, whose weights then move to the file rather
    than a copy's (the caller must drop its reference before the session reads the file,
    or the weights are held twice beside ONNX Runtime's own)."""
    import onnx

    from pipeline.graph import onnx_model
    from pipeline.graph.external_data import write_gathered

    if base is None and _names_external_data(model):
        raise PipelineError("an in-memory graph with external data needs the folder of its data")
    if onnx_model.weight_bytes(model) < onnx_model.inline_limit():
        external = base if _names_external_data(model) else None
        yield GraphBytes(model.SerializeToString(), external)
        return
    with tempfile.TemporaryDirectory(prefix="graph.") as tmp:
        path = Path(tmp) / "model.onnx"
        if consume:
            write_gathered(model, base, path)  # the model's tensors name the file now
        else:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)  # the caller's graph keeps its weights in memory
            write_gathered(copy, base, path)
            del copy
        yield path


def _names_external_data(model: ModelProto) -> bool:
    from onnx.external_data_helper import uses_external_data

    return any(uses_external_data(t) for t in model.graph.initializer)


def session_with_outputs(model: ModelProto, base: Path | None, names: list[str]) -> Any:
    """A session of `model` (weights in `base`'s files where it keeps them there) that can
    also return the tensors `names`: each becomes a graph output without a type, which ONNX
    Runtime infers. For the statistics calibration takes of intermediate tensors."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)  # the graph: weights kept in files stay there
    present = {o.name for o in m.graph.output}
    m.graph.output.extend(
        onnx.ValueInfoProto(name=t) for t in dict.fromkeys(names) if t not in present
    )
    with model_file(m, base) as f:
        return ort_session(f, basic_optimizations=True)


def run_named(session: Any, names: list[str], feeds: dict[str, np.ndarray], what: str) -> list[Any]:
    """session.run for the named outputs; a failure is one line saying what was being done."""
    try:
        return list(session.run(names, feeds))
    except Exception as e:
        raise PipelineError(f"ONNX Runtime failed {what}: {first_line(e)}") from None


def run_model(
    model: ModelProto, batches: list[dict[str, np.ndarray]], base: Path | None = None
) -> list[dict[str, np.ndarray]]:
    """run_batches for an in-memory graph (see model_file)."""
    with model_file(model, base) as f:
        return run_batches(f, batches)
