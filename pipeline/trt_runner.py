"""Running an engine needs a GPU that the TensorRT flavour supports. This module
only says whether that is possible here, and runs the engine through Polygraphy
where it is."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

RTX_SUPPORTED_CC = ("7.5", "8.0", "8.6", "8.9")  # and 12.x


def why_not_runnable(fingerprint: dict) -> str | None:
    """None when an engine built for this fingerprint can run here, else the reason."""
    gpu = fingerprint.get("gpu")
    if gpu is None:
        return "no GPU on this machine: a TensorRT engine needs an NVIDIA GPU to run"
    cc = gpu["compute_capability"]
    if fingerprint["trt_flavour"] == "tensorrt_rtx" and not (cc in RTX_SUPPORTED_CC or cc.startswith("12.")):
        return f"TensorRT-RTX does not run on compute capability {cc} ({gpu['name']})"
    return None


def make_engine_fn(engine_path: Path, flavour: str, feeds: dict[str, np.ndarray]) -> tuple[Callable, Callable]:
    """(infer, close) for one engine and fixed feeds, through Polygraphy's TrtRunner."""
    if flavour == "tensorrt_rtx":
        os.environ["POLYGRAPHY_USE_TENSORRT_RTX"] = "1"
    from polygraphy.backend.common import BytesFromPath
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    runner = TrtRunner(EngineFromBytes(BytesFromPath(str(engine_path))))
    runner.activate()

    def infer():
        return runner.infer(feeds, copy_outputs_to_host=True)

    return infer, runner.deactivate
