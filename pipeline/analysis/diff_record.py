"""What `trt-pipeline diff` compares and what it answers (pipeline/analysis/diff.py): each
build as it reads it, and the comparison `--json` prints."""

from __future__ import annotations

from typing import Any, TypedDict


class BuildView(TypedDict):
    """One build as `trt-pipeline diff` compares it, from its build or inspect folder."""

    path: str
    kind: str  # "build" or "inspect"
    precision: str
    tensorrt: str  # "<flavour> <version>"
    engine_bytes: int
    build_seconds: float | None
    layers_original: int | None  # None: an older log without fusion_basis
    layers_final: int | None
    fusion_ratio: float | None
    peak_memory_mib: float | None
    weights_bytes: int | None
    activation_bytes: int | None
    warnings: list[str]
    engine_precisions: dict[str, int]  # precision -> layers of the engine
    network_precisions: dict[str, int]  # precision -> layers of the network
    layer_precisions: dict[str, str]  # layer -> its precision


class Delta(TypedDict):
    """One figure of both builds, and how far B moved it."""

    a: Any  # a figure of each side; change where both are numbers
    b: Any
    change: float | int | None


class BuildHeader(TypedDict):
    """Which build a side is: the head of the comparison."""

    path: str
    kind: str
    precision: str
    tensorrt: str


class PrecisionChange(TypedDict):
    """A layer both builds have, at another precision in B."""

    layer: str
    a: str
    b: str
    change: str  # "wider", "narrower" or "other" (a type outside the compute order)


class Sides(TypedDict):
    """A precision mix of each build."""

    a: dict[str, int]  # precision -> layers
    b: dict[str, int]


class DiffFigures(TypedDict):
    """B against baseline A, before it is judged."""

    a: BuildHeader
    b: BuildHeader
    metrics: dict[str, Delta]  # figure (engine_bytes, fusion_ratio, ..., warnings) -> its delta
    engine_precisions: Sides
    network_precisions: Sides
    layers_compared: int  # layer names both builds have
    precision_changes: list[PrecisionChange]
    warnings_added: list[str]
    warnings_removed: list[str]


class DiffResult(DiffFigures):
    """The comparison, judged: what `--json` prints and `--fail-on-regression` reads."""

    regressions: list[str]  # a line each; none: B does not regress
