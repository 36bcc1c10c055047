"""Every graph the int8/fp8 path writes, made from one fp32 source: the plain Q/DQ graph
and the graphs with some nodes kept in fp32, each with the smoothing its quantized
MatMuls need and Q/DQ pairs where the plan's placement puts them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.graph import onnx_runtime
from pipeline.precision.common import checkpoints
from pipeline.precision.common.searchable import Switchboard
from pipeline.precision.qdq import plan, smoothing
from pipeline.precision.qdq.plan import QdqPlan
from pipeline.precision.qdq.smoothing import SmoothGroup

if TYPE_CHECKING:
    from onnx import ModelProto


@dataclass
class QdqGraphs:
    source: ModelProto  # the fp32 graph, at an opset the Q/DQ nodes fit in
    plan: QdqPlan
    smooth: list[SmoothGroup] = field(default_factory=list)
    base_dir: Path | None = None  # where the source's external-data files are
    made: dict[str, Any] = field(default_factory=dict)  # smoothing.smoothed_tensors()
    scratch: TemporaryDirectory[str] | None = None  # holds base_dir's files while this lives
    ladder: tuple[str, ...] = ("fp16",)  # a kept node tries fp16 before fp32

    def graph(self, keep: Iterable[str] = (), int8: Iterable[str] = ()) -> Any:
        """The graph with `keep` in fp32. A smoothing group whose MatMuls are all kept
        is not smoothed: with every node kept this is the source graph, unchanged.
        `int8` is never asked of a Q/DQ graph: its ladder holds no int8."""
        kept = set(keep)
        active = [g for g in self.smooth if not set(g.matmuls) <= kept]
        base = smoothing.apply(self.source, active, kept, self.made) if active else self.source
        return plan.materialize(base, self.plan, kept)

    def fits(self, name: str, kind: str) -> bool:
        """Any kept node may compute in fp16 (the one type of its ladder)."""
        return kind in self.ladder

    def smoothed(self) -> Any:
        """The fp32 graph with every smoothing group applied (what ModelOpt calibrated)."""
        return (
            smoothing.apply(self.source, self.smooth, made=self.made)
            if self.smooth
            else self.source
        )

    def run(
        self, model: ModelProto, feeds: list[dict[str, np.ndarray]]
    ) -> list[dict[str, np.ndarray]]:
        return onnx_runtime.run_model(model, feeds, self.base_dir)

    def switchboard(self, batches: list[dict[str, np.ndarray]]) -> Switchboard:
        """One ONNX Runtime session that runs any choice of kept nodes (qdq_plan.switchable).
        Smoothing groups are in their Mul form there, so a kept node of a group folded into
        its LayerNorm reads the unsmoothed tensors: the same product within fp32 rounding;
        the graph written is judged as written."""
        mul_form = [replace(g, fold=False) for g in self.smooth]

        def switchable() -> tuple[Any, dict[str, str]]:
            base = (
                smoothing.apply(self.source, mul_form, made=self.made, sources_kept=True)
                if mul_form
                else self.source
            )
            kept_inputs = {n.name: list(n.input) for n in base.graph.node}
            kept_inputs.update({n.name: list(n.input) for n in self.source.graph.node})
            # The smoothed copy is the switchboard's own: made into it in place, its
            # weights not copied on the way.
            fresh = base is not self.source
            return plan.switchable(base, self.plan, kept_inputs, in_place=fresh)

        model, flags = switchable()
        # Each GEMM's picks run as Ifs (variants.switchboard_session), as precision=auto's
        # do: only the branch taken runs, so a step widens the weights it quantizes and no
        # others. On the 653 MB decoder's switchboard (benchmarks/decoder_int8.py,
        # 2026-11-28) 0.27 s a run against the Wheres' 0.67 s, 930 MiB peak against
        # 1,245 MiB (the Wheres had been kept for memory before ONNX Runtime's memory
        # patterns were turned off: onnx_runtime.ort_session).
        session, resume = checkpoints.switchboard_session(
            model, lambda: switchable()[0], self.base_dir, None
        )
        return Switchboard(session, flags, batches, resume)
