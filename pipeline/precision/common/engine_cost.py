"""What an engine costs, as the precision layer asks it of the layer that builds engines.

The precision transforms never build: the calibrate stage hands them this (measured by
pipeline/flow/engine_sizes.py with TensorRT or TensorRT-RTX on this machine, under the
build settings and fingerprint the build stage keys its engine by). precision=auto's
objective (`engine_bytes`) reads it, and every quantized mode records the fp16 and fp32
engines of its graph beside its own, so a quantized engine larger than fp16's is said
in the run that made it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from pipeline.core.engine_sizes import EngineSize
from pipeline.records.calibration_file import EnginesRecord


class EngineCost(Protocol):
    """This machine's engines of the graphs a search asks about."""

    # "TensorRT-RTX 1.7.1.116, no GPU (portable ahead-of-time target)"
    measured_with: str
    # "fp16", "fp32": the engines of the exported graph in those precisions
    references: dict[str, EngineSize]
    # the build settings, profiles and machine they were measured under (cache_key's digest)
    settings_sha256: str

    def measure_references(self, export_dir: Path, first_batch: dict[str, np.ndarray]) -> None:
        """Fill `references`: the exported graph's fp32 engine, and the fp16 one of the
        graph precision=fp16 makes of it (AutoCast on `first_batch`, as that run does).
        Measured once, when first asked (after the graph is made: bad input stops first)."""
        ...

    def size_of(self, graph: Path, what: str) -> EngineSize | None:
        """The engine of `graph` under this run's build settings (`what` names it in
        lines); None where TensorRT could not build it (said in a line)."""
        ...


# The references an EngineCost measures, in the order it measures them.
REFERENCES: tuple[Literal["fp32", "fp16"], ...] = ("fp32", "fp16")


def record(engines: EngineCost) -> EnginesRecord:
    """What calibration.json keeps of the measures (`engines`): how, and the references."""
    out: EnginesRecord = {
        "measured_with": engines.measured_with,
        "settings_sha256": engines.settings_sha256,
    }
    for kind in REFERENCES:
        if kind in engines.references:
            out[kind] = engines.references[kind]
    return out
