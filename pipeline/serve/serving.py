"""Which server can load a repository's plans: a plan loads only in the TensorRT that built it,
and Triton's TensorRT backend deserializes without checking, so a plan from another version
fails on the serving host, after the build looked green. With a pinned serving image
(pin.serve, core/ngc.py) the package refuses every plan that image cannot load, in one line,
and names the server in each model's folder (`serving.txt`, and config.pbtxt's first
lines)."""

from __future__ import annotations

from pipeline.core import ngc
from pipeline.core.errors import PipelineError
from pipeline.serve.triton_config import Engine

FILE = "serving.txt"


def refuse_unloadable(serve: ngc.Image | None, engines: list[Engine]) -> None:
    """One line for the first plan the pinned serving image cannot load."""
    if serve is None:
        return
    for e in engines:
        if e.flavour != "tensorrt":
            raise PipelineError(
                f"package: the plan of {e.fingerprint_id} was built by TensorRT-RTX "
                f"{e.trt_version}; {serve} (Triton's TensorRT backend, full TensorRT"
                f"{' ' + serve.tensorrt if serve.tensorrt else ''}) cannot load it: build in "
                f"pin.build's image (trt-pipeline init --ci writes the job)"
            )
        if serve.tensorrt and e.trt_version != serve.tensorrt:
            raise PipelineError(
                f"package: the plan of {e.fingerprint_id} was built by TensorRT "
                f"{e.trt_version}; {serve} loads TensorRT {serve.tensorrt} plans only (it "
                f"would fail at load: 'Version tag does not match'): rebuild it in the pinned "
                f"build image, or pin the serving release that carries {e.trt_version}"
            )


def note(serve: ngc.Image | None, engines: list[Engine]) -> str:
    """Who serves these plans and who built them: serving.txt, and config.pbtxt's header."""
    if serve is None:
        lines = ["No serving image pinned (pin.serve): a plan loads only in the TensorRT"]
        lines.append("that built it, listed below; serve it there.")
    else:
        triton = f"Triton {serve.triton}, " if serve.triton else ""
        trt = f"TensorRT {serve.tensorrt}" if serve.tensorrt else "its TensorRT"
        lines = [f"Serve with {serve} ({triton}{trt})."]
    for e in engines:
        where = f" in {e.built_in}" if e.built_in else ""
        lines.append(
            f"{e.fingerprint_id}: {e.gpu or 'no GPU'}, built by {e.flavour} {e.trt_version}{where}"
        )
    return "\n".join(lines)
