"""reference.npz, the export's reference set: for each batch the inputs fed, the fp32
outputs ONNX Runtime gave, and any labels of the user's (`label:<name>`) beside the outputs.
Written and read here only; a reader checks every key, so a file of another format or a
truncated one is one line naming it, not a KeyError further on."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from pipeline.core import fileio
from pipeline.core.errors import PipelineError

Arrays = dict[str, np.ndarray]
Pair = tuple[Arrays, Arrays]  # (inputs, outputs and labels) of one batch
KINDS = ("in", "out")
_KEY = re.compile(r"^(in|out)::(\d+)::(.+)$")


def key(kind: str, batch: int, name: str) -> str:
    """`in::0::x`: an array's name in the file (also the weak-typing calibration inputs')."""
    return f"{kind}::{batch}::{name}"


def write(path: Path, pairs: list[Pair]) -> Path:
    arrays: Arrays = {}
    for b, (inputs, outputs) in enumerate(pairs):
        arrays.update({key("in", b, k): v for k, v in inputs.items()})
        arrays.update({key("out", b, k): v for k, v in outputs.items()})
    return fileio.write_npz(path, arrays)


def read(path: Path, what: str = "reference data") -> list[Pair]:
    """The batches in order; each must have inputs and outputs, numbered from 0 without gaps."""
    return split(fileio.read_npz(path, what), path)


def split(arrays: dict[str, np.ndarray], path: Path | str = "reference set") -> list[Pair]:
    batches: dict[int, Pair] = {}
    for name, value in arrays.items():
        m = _KEY.match(name)
        if m is None:
            raise PipelineError(
                f"{path} holds '{name}', which is not a reference array (in::N::input or "
                f"out::N::output); rerun the export stage"
            )
        pair = batches.setdefault(int(m.group(2)), ({}, {}))
        pair[KINDS.index(m.group(1))][m.group(3)] = value
    order = sorted(batches)
    if order != list(range(len(order))) or any(not i or not o for i, o in batches.values()):
        raise PipelineError(
            f"{path} is incomplete (batches {order}, each needs inputs and outputs); rerun the "
            f"export stage"
        )
    return [batches[i] for i in order]
