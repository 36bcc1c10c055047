"""What the searches need of a family's graphs, and nothing of the family itself: the
plan's candidates (the nodes that read a low type), a graph with some of them kept out of
it, one ONNX Runtime session that runs any choice (the switchboard), and the types a kept
node may try before fp32 (its ladder). qdq/graphs.py (int8/fp8) and int4/graphs.py
(int4) each give this surface; fallback/ and mixed/ read it only through here."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pipeline.precision.common import checkpoints

if TYPE_CHECKING:
    from onnx import ModelProto


class SearchPlan(Protocol):
    """Which nodes read a low type, and each one's op type."""

    op_types: dict[str, str]
    placement: str

    def candidates(self) -> list[str]: ...


class Searchable(Protocol):
    """A family's graphs, all made from one fp32 source."""

    source: ModelProto  # the fp32 graph (an onnx.ModelProto)
    plan: Any  # a SearchPlan (a Protocol attribute cannot narrow to one, the families' differ)
    base_dir: Path | None  # where the source's external-data files are
    # the types a kept node tries, cheapest first, before fp32 (fallback/written.py)
    ladder: tuple[str, ...]

    def graph(self, keep: Iterable[str] = (), int8: Iterable[str] = ()) -> Any: ...

    def switchboard(self, batches: list[dict[str, np.ndarray]]) -> Switchboard: ...

    def run(
        self, model: ModelProto, feeds: list[dict[str, np.ndarray]]
    ) -> list[dict[str, np.ndarray]]: ...

    def fits(self, node: str, kind: str) -> bool: ...


@dataclass
class Switchboard:
    """One session with a bool input per candidate: True reads the low type."""

    session: Any
    flags: dict[str, str]  # candidate node -> its bool input
    batches: list[dict[str, np.ndarray]]
    resume: checkpoints.Resume | None = None  # None: never run from checkpoints

    def outputs(
        self, keep: Iterable[str], which: list[int] | None = None
    ) -> list[dict[str, np.ndarray]]:
        """The outputs with `keep` out of the low type, on the batches `which` (all: None),
        from a checkpoint where one is open (checkpointed()) and applies."""
        kept = set(keep)
        on = {flag: node not in kept for node, flag in self.flags.items()}
        return checkpoints.run(self.session, self.resume, on, self.batches, which)

    def place(self, nodes: Iterable[str]) -> int:
        """Where in the graph the first of `nodes` is switched, while checkpoints are open
        (0 otherwise, and for a node that is no candidate)."""
        opened = self.resume.open if self.resume else None
        if opened is None:
            return 0
        return min((opened.first_pick.get(self.flags.get(n, ""), 0) for n in nodes), default=0)

    def checkpointed(self, which: list[int], expected_s: float) -> ContextManager[None]:
        """Inside, runs on the batches `which` that quantize candidates past a cut start
        there (common/checkpoints.py), where that pays for runs taking `expected_s` whole."""
        flags = list(self.flags.values())
        return checkpoints.opened(self.resume, flags, self.batches, which, expected_s)
