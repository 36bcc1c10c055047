"""One function per pipeline stage, each the door to its module (flow/<stage>_step.py).
DVC stages (stages/*.py) and the Hydra sweep (pipeline/sweeps/job.py) both call these, so
they share one code path and one store.

Each step imports its module inside its own body, and that module the layers it uses: a
stage process then loads only those (dvc.yaml lists exactly those folders as the stage's
code deps, and a store hit starts without numpy, onnx or TensorRT). Only pipeline.core is shared, and
of it not the config schema (OmegaConf), which the always-run fingerprint stage skips."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipeline.core import fileio, memory
from pipeline.core.layout import Layout
from pipeline.core.machine_settings import FingerprintParams
from pipeline.core.stages import STAGES
from pipeline.flow import output_folder

if TYPE_CHECKING:
    # The schema types only: at run time a config is the DictConfig validate() made.
    from pipeline.core.config import PipelineConfig


def fingerprint(cfg: FingerprintParams, layout: Layout) -> dict[str, Any]:
    from pipeline.flow import fingerprint_step

    return fingerprint_step.run(cfg, layout)


def read_fingerprint(layout: Layout) -> dict[str, Any]:
    fp: dict[str, Any] = fileio.read_json(
        layout.fingerprint, "fingerprint (run the fingerprint stage)"
    )
    return fp


def export(cfg: PipelineConfig, layout: Layout) -> dict[str, Any]:
    from pipeline.flow import export_step

    return export_step.run(cfg, layout)


def calibrate(cfg: PipelineConfig, layout: Layout) -> dict[str, Any]:
    from pipeline.flow import calibrate_step

    return calibrate_step.run(cfg, layout)


def build(cfg: PipelineConfig, layout: Layout, progress: bool = True) -> dict[str, Any]:
    from pipeline.flow import build_step

    return build_step.run(cfg, layout, read_fingerprint(layout), progress)


def inspect(cfg: PipelineConfig, layout: Layout) -> dict[str, Any]:
    peak = memory.StagePeak()
    with output_folder.writing(
        layout, layout.inspect_dir, remove_on_failure=False, stage="inspect"
    ):
        from pipeline.flow import inspect_step

        return inspect_step.run(cfg, layout, read_fingerprint(layout), peak)


def benchmark(cfg: PipelineConfig, layout: Layout) -> dict[str, Any]:
    # Its files lie among other stages' in metrics/; one lock of its own also keeps two
    # benchmarks from measuring each other's load.
    what = f"the benchmark's files in {layout.metrics_dir}"
    peak = memory.StagePeak()
    with output_folder.writing(
        layout, layout.metrics_dir / "benchmark", what, remove_on_failure=False
    ):
        from pipeline.flow import benchmark_step

        return benchmark_step.run(cfg, layout, read_fingerprint(layout), peak)


def package(cfg: PipelineConfig, layout: Layout) -> dict[str, Any]:
    from pipeline.flow import package_step

    return package_step.run(cfg, layout)


# Each stage's function, by the name dvc.yaml and core/stages.py give it.
STEPS: dict[str, Callable[[PipelineConfig, Layout], dict[str, Any]]] = {
    "fingerprint": fingerprint,
    "export": export,
    "calibrate": calibrate,
    "build": build,
    "inspect": inspect,
    "benchmark": benchmark,
    "package": package,
}


def run_all(
    cfg: PipelineConfig,
    layout: Layout,
    on_step: Callable[[str, dict[str, Any]], None] | None = None,
    done: dict[str, dict[str, Any]] | None = None,
    stages: tuple[str, ...] = STAGES,
) -> dict[str, dict[str, Any]]:
    """Each of `stages` in order but those `done` holds results of; `on_step(name, result)`
    after each (a Hydra job logs it)."""
    results = dict(done or {})
    for name in stages:
        if name in results:
            continue
        results[name] = STEPS[name](cfg, layout)
        if on_step is not None:
            on_step(name, results[name])
    return results
