"""Checkpoints of a switchboard graph: its all-fp32 activations at a few cut points, so that
a graph that changes only GEMMs past a cut runs from the cut instead of from the inputs.

precision=auto's sensitivity phase (mixed/search.py) judges each GEMM alone in each low
type, and the fallback (fallback/search.py) each group, block or node quantized alone: one
whole-graph run each, every node before the first one changed computing exactly what the
all-fp32 graph computes. Here the all-fp32 graph runs once on the ranking batches
and keeps the tensors that cross each cut; a run whose first switched GEMM lies past a cut
starts there, in a session of the nodes after it (built when first needed, the one before
dropped: units are mostly judged in graph order). Its outputs are the whole graph's to float
rounding: the same nodes on the same values, though ONNX Runtime may sum in another order
in the smaller graph (within 6e-7 on the MiniLM-size stand-in; bit for bit on the bundled
transformer); the graphs the search then weighs are judged whole. On PP-OCRv4's recognizer
(47 candidate GEMMs), 8 cuts leave each run about half the graph's FLOPs on average.
Cuts are used only where they pay for their sessions (Cost): a model whose runs are quick
beside the time its weights take to load keeps running whole.

Only for a switchboard held in memory and at most WEIGHT_BYTES of weights: the session of a
cut loads the weights after it again."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.graph import onnx_model, onnx_runtime
from pipeline.precision.common import ops, variants

if TYPE_CHECKING:
    from onnx import ModelProto

MAX_CUTS = 8
MIN_PER_CUT = 3  # candidates a cut should serve to be worth its session
HELD_BYTES = 1 << 30  # the kept activations of every cut together, at most
# A cut's session loads the weights after it again beside the switchboard's own: past this
# many bytes of them (a decoder's 653 MB switchboard) the runs stay whole.
WEIGHT_BYTES = 256 << 20


@dataclass
class Cut:
    at: int  # index of the first node the suffix runs, in the switchboard's order
    crossing: list[str]  # tensors made before the cut and read after it
    session: Any = None


@dataclass
class Checkpoints:
    """The cuts of one switchboard and its activations there on the batches `held`."""

    remake: Callable[[], ModelProto]  # the switchboard graph, unfolded (a fresh copy each call)
    base_dir: Path | None
    first_pick: dict[str, int]  # flag -> index of the first node reading it
    cuts: list[Cut]
    held: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # batch -> tensors
    _open: Cut | None = None

    def outputs(
        self, flags: Mapping[str, bool], which: list[int]
    ) -> list[dict[str, np.ndarray]] | None:
        """The graph's outputs on the batches `which` with `flags` as given, run from the
        latest cut before the first node a set flag reaches; None where no cut applies
        (none before that node, no flag set, or a batch not held)."""
        # a flag no node reads changes nothing
        set_at = [self.first_pick[f] for f, on in flags.items() if on and f in self.first_pick]
        first = min(set_at, default=None)
        usable = [c for c in self.cuts if first is not None and c.at <= first]
        if not usable or any(i not in self.held for i in which):
            return None
        cut = usable[-1]
        session = self._session(cut)
        wanted = {i.name for i in session.get_inputs()}
        runs = [{k: v for k, v in self.held[i].items() if k in wanted} for i in which]
        given = {f: np.array(on) for f, on in flags.items() if f in wanted}
        return onnx_runtime.run_session(session, runs, "the search graph from a checkpoint", given)

    def _session(self, cut: Cut) -> Any:
        if self._open is not cut:
            if self._open is not None:
                self._open.session = None  # one suffix session at a time
            cut.session = variants.switchboard_session(
                suffix(self.remake(), cut, self.held), self.base_dir, narrow=False
            )
            self._open = cut
        return cut.session

    def close(self) -> None:
        if self._open is not None:
            self._open.session = None
        self._open, self.held = None, {}


@dataclass
class Resume:
    """What a switchboard held in memory needs to open checkpoints: its graph made again,
    where its weights' files are, and what opening its own session took."""

    remake: Callable[[], ModelProto]  # the switchboard graph, unfolded (a fresh copy each call)
    base_dir: Path | None
    session_s: float
    open: Checkpoints | None = None

    def outputs(
        self, flags: Mapping[str, bool], which: list[int] | None
    ) -> list[dict[str, np.ndarray]] | None:
        """From the open checkpoints where they apply (Checkpoints.outputs), else None."""
        if self.open is None or which is None:
            return None
        return self.open.outputs(flags, which)


def switchboard_session(
    model: ModelProto, remake: Callable[[], ModelProto], base_dir: Path | None, narrow: bool | None
) -> tuple[Any, Resume | None]:
    """A switchboard's session (variants.switchboard_session; `narrow` None: by the model)
    and, for one held in memory with at most WEIGHT_BYTES of weights, the Resume that runs
    it from checkpoints, with the time the session took to open (Cost weighs each cut's
    session by it). Decided here, so a graph too large never has its switchboard remade."""
    from pipeline.precision.common import streamed

    if narrow is None:
        narrow = streamed.external_data(model)
    resumable = not narrow and onnx_model.weight_bytes(model) <= WEIGHT_BYTES
    started = time.perf_counter()
    session = variants.switchboard_session(model, base_dir, narrow)
    resume = Resume(remake, base_dir, time.perf_counter() - started) if resumable else None
    return session, resume


def run(
    session: Any,
    resume: Resume | None,
    flags: Mapping[str, bool],
    batches: list[dict[str, np.ndarray]],
    which: list[int] | None,
) -> list[dict[str, np.ndarray]]:
    """A switchboard's outputs with `flags` as given, on the batches `which` (all: None):
    from an open checkpoint where one applies, else from its whole-graph `session`."""
    resumed = resume.outputs(flags, which) if resume else None
    if resumed is not None:
        return resumed
    feeds = batches if which is None else [batches[i] for i in which]
    extra = {flag: np.array(on) for flag, on in flags.items()}
    return onnx_runtime.run_session(session, feeds, "the search graph", extra)


@contextlib.contextmanager
def opened(
    resume: Resume | None,
    flags: list[str],
    batches: list[dict[str, np.ndarray]],
    which: list[int],
    expected_s: float,
) -> Iterator[None]:
    """Inside, `resume`'s switchboard runs on the batches `which` from checkpoints, where
    they save more than their sessions cost for runs that take `expected_s` whole."""
    if resume is not None:
        held = {i: batches[i] for i in which}
        cost = Cost(expected_s, resume.session_s)
        resume.open = build(resume.remake, flags, held, resume.base_dir, cost)
    try:
        yield
    finally:
        if resume is not None and resume.open is not None:
            resume.open.close()
            resume.open = None


def build(
    remake: Callable[[], ModelProto],
    flags: list[str],
    batches: Mapping[int, dict[str, np.ndarray]],
    base_dir: Path | None,
    cost: Cost,
) -> Checkpoints | None:
    """Checkpoints for the switchboard `remake()` makes, held on `batches` (index -> feeds);
    None where too few candidates share a cut, the cuts' sessions would cost more than
    they save, or the activations would not fit."""
    model = remake()
    nodes = list(model.graph.node)
    first_pick = _first_readers(nodes, set(flags))
    positions = sorted(set(first_pick.values()))
    k = min(MAX_CUTS, len(positions) // MIN_PER_CUT)
    if k < 1:
        return None
    ats = sorted({positions[j * len(positions) // k] for j in range(k)} - {0})
    if not cost.worth(model, ats, sorted(first_pick.values())):
        return None
    cuts = [Cut(at, crossing(model, at, set(flags))) for at in ats]
    graph_inputs = {i.name for i in model.graph.input}
    made = sorted({t for c in cuts for t in c.crossing} - graph_inputs)
    # Not through the switchboard's own folded session: that computes a variant of an
    # activation (its fp16 rounding) inside the If that picks it, where no output reaches.
    session = onnx_runtime.session_with_outputs(model, base_dir, made)
    del model, nodes
    off = {f: np.array(False) for f in flags}
    held = {}
    for i, feeds in batches.items():
        run = onnx_runtime.run_session(session, [feeds], "the all-fp32 search graph", off)[0]
        held[i] = {t: run[t] for t in made} | dict(feeds)
    kept = _within_budget(cuts, held)
    if not kept:
        return None
    return Checkpoints(remake, base_dir, first_pick, kept, held)


@dataclass
class Cost:
    """What the runs would take whole and what opening the whole switchboard took: the
    measures that say whether cuts pay for their sessions."""

    runs_s: float
    session_s: float

    def worth(self, model: ModelProto, ats: list[int], starts: list[int]) -> bool:
        """The time saved (the nodes each run skips, as a share of the graph's) at least
        twice what the cuts' sessions cost (each a share of the whole one's, by the weight
        bytes after its cut). A CNN's early layers weigh more than their share of nodes:
        this undercounts what it saves there."""
        nodes = list(model.graph.node)
        sizes = {i.name: onnx_model.tensor_bytes(i) for i in model.graph.initializer}
        total = sum(sizes.values()) or 1
        skipped = [max((a for a in ats if a <= s), default=0) / len(nodes) for s in starts]
        saved = self.runs_s * sum(skipped) / len(skipped)
        opened = sum(
            self.session_s * sum(sizes.get(x, 0) for x in _reads_from(nodes[a:])) / total
            for a in ats
        )
        return saved >= 2 * opened


def _reads_from(nodes: list[Any]) -> set[str]:
    return {x for n in nodes for x in ops.node_reads(n)}


def crossing(model: ModelProto, at: int, flags: set[str]) -> list[str]:
    """The tensors made before node `at` (or fed to the graph) that a node from `at` on
    reads, inside its subgraphs too, or that the graph returns; no weights, no flags, and
    nothing made from weights alone (a weight's variants: the suffix makes those again, as
    the whole graph's session does, rather than hold a copy of each per batch)."""
    nodes = list(model.graph.node)
    before = {i.name for i in model.graph.input} | {o for n in nodes[:at] for o in n.output}
    after = _reads_from(nodes[at:])
    after |= {o.name for o in model.graph.output}
    weights = {i.name for i in model.graph.initializer}
    return sorted((before & after) - weights - flags - _from_weights(nodes[:at], weights))


def suffix(model: ModelProto, cut: Cut, held: Mapping[int, dict[str, np.ndarray]]) -> Any:
    """`model` from node `cut.at` on, after the nodes before it that read weights only: the
    crossing tensors and the flags it reads are its inputs (typed as the held arrays are),
    the weights it reads its initializers."""
    from onnx import helper

    sample = next(iter(held.values()))
    every = list(model.graph.node)
    weights = {i.name for i in model.graph.initializer}
    made = _from_weights(every[: cut.at], weights)
    nodes = [n for n in every[: cut.at] if set(n.output) <= made] + every[cut.at :]
    reads = _reads_from(nodes)
    flag_inputs = [i for i in model.graph.input if i.name in reads and i.name not in sample]
    inputs = [
        helper.make_tensor_value_info(
            t, helper.np_dtype_to_tensor_dtype(sample[t].dtype), [None] * sample[t].ndim
        )
        for t in cut.crossing
    ]
    inits = [i for i in model.graph.initializer if i.name in reads]
    graph = helper.make_graph(
        nodes, "switchboard suffix", inputs + flag_inputs, list(model.graph.output), inits
    )
    return helper.make_model(
        graph,
        opset_imports=model.opset_import,
        ir_version=model.ir_version,
        functions=model.functions,
    )


def _from_weights(nodes: list[Any], weights: set[str]) -> set[str]:
    """What `nodes` (in order) make from weights alone."""
    made: set[str] = set()
    for n in nodes:
        if all(not x or x in weights or x in made for x in ops.node_reads(n)):
            made.update(n.output)
    return made


def _first_readers(nodes: list[Any], flags: set[str]) -> dict[str, int]:
    first: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for x in ops.node_reads(n):
            if x in flags:
                first.setdefault(x, i)
    return first


def _within_budget(cuts: list[Cut], held: Mapping[int, dict[str, np.ndarray]]) -> list[Cut]:
    """The cuts whose activations fit HELD_BYTES together, the latest first (a late cut
    keeps the least and serves the runs that gain the most)."""
    kept: list[Cut] = []
    total = 0
    for cut in reversed(cuts):
        size = sum(int(b[t].nbytes) for b in held.values() for t in cut.crossing)
        if total + size > HELD_BYTES:
            break
        kept.insert(0, cut)
        total += size
    return kept
