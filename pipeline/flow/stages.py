"""One function per pipeline stage, each the door to its module (flow/<stage>_stage.py).
DVC stages (stages/*.py) and the Hydra sweep (pipeline/sweeps/job.py) both call these, so
they share one code path and one store.

Each step imports its module inside its own body, and that module the layers it uses: a
stage process then loads only those (dvc.yaml lists exactly those folders as the stage's
code deps, and a store hit starts without numpy, onnx or TensorRT). Only pipeline.core is shared, and
of it not the config schema (OmegaConf), which the always-run fingerprint stage skips."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, Union, cast

from pipeline.core import memory
from pipeline.core.layout import Layout
from pipeline.core.machine_settings import FingerprintParams
from pipeline.core.stage_names import STAGES
from pipeline.flow import output_folder
from pipeline.records import fingerprint_file
from pipeline.records.fingerprint_file import FingerprintRecord

if TYPE_CHECKING:
    # The schema types only: at run time a config is the DictConfig validate() made.
    from pipeline.core.config import PipelineConfig
    from pipeline.records.benchmark_file import BenchmarkRecord
    from pipeline.records.build_file import BuildRecord
    from pipeline.records.calibration_file import CalibrationRecord
    from pipeline.records.export_file import ExportRecord
    from pipeline.records.inspect_file import InspectRecord
    from pipeline.records.package_file import PackageRecord

# What one stage returns: its record, as its file keeps it (and the stage's peak memory).
StageRecord = Union[
    "FingerprintRecord",
    "ExportRecord",
    "CalibrationRecord",
    "BuildRecord",
    "InspectRecord",
    "BenchmarkRecord",
    "PackageRecord",
]


class StageRecords(TypedDict, total=False):
    """run_all's results, by stage name."""

    fingerprint: FingerprintRecord
    export: ExportRecord
    calibrate: CalibrationRecord
    build: BuildRecord
    inspect: InspectRecord
    benchmark: BenchmarkRecord
    package: PackageRecord


def fingerprint(cfg: FingerprintParams, layout: Layout) -> FingerprintRecord:
    from pipeline.flow import fingerprint_stage

    return fingerprint_stage.run(cfg, layout)


def read_fingerprint(layout: Layout) -> FingerprintRecord:
    return fingerprint_file.read(layout.fingerprint)


def export(cfg: PipelineConfig, layout: Layout) -> ExportRecord:
    from pipeline.flow import export_stage

    return export_stage.run(cfg, layout)


def calibrate(cfg: PipelineConfig, layout: Layout) -> CalibrationRecord:
    from pipeline.flow import calibrate_stage

    return calibrate_stage.run(cfg, layout)


def build(cfg: PipelineConfig, layout: Layout, progress: bool = True) -> BuildRecord:
    from pipeline.flow import build_stage

    return build_stage.run(cfg, layout, read_fingerprint(layout), progress)


def inspect(cfg: PipelineConfig, layout: Layout) -> InspectRecord:
    peak = memory.StagePeak()
    with output_folder.writing(
        layout, layout.inspect_dir, remove_on_failure=False, stage="inspect"
    ):
        from pipeline.flow import inspect_stage

        return inspect_stage.run(cfg, layout, read_fingerprint(layout), peak)


def benchmark(cfg: PipelineConfig, layout: Layout) -> BenchmarkRecord:
    # Its files lie among other stages' in metrics/; one lock of its own also keeps two
    # benchmarks from measuring each other's load.
    what = f"the benchmark's files in {layout.metrics_dir}"
    peak = memory.StagePeak()
    with output_folder.writing(
        layout, layout.metrics_dir / "benchmark", what, remove_on_failure=False
    ):
        from pipeline.flow import benchmark_stage

        return benchmark_stage.run(cfg, layout, read_fingerprint(layout), peak)


def package(cfg: PipelineConfig, layout: Layout) -> PackageRecord:
    from pipeline.flow import package_stage

    return package_stage.run(cfg, layout)


def index(cfg: PipelineConfig, layout: Layout) -> list[dict[str, Any]]:
    """A project of several models: one page and table across them (index/)."""
    from pipeline.report import models_index

    precisions = {str(name): str(m["precision"]["name"]) for name, m in cfg.models.items()}
    return models_index.write(layout.root, precisions, layout.index_dir)


# Each stage's function, by the name dvc.yaml and core/stage_names.py give it.
BY_NAME: dict[str, Callable[[PipelineConfig, Layout], StageRecord]] = {
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
    on_stage: Callable[[str, StageRecord], None] | None = None,
    done: StageRecords | None = None,
    stages: tuple[str, ...] = STAGES,
) -> StageRecords:
    """Each of `stages` in order but those `done` holds results of; `on_stage(name, result)`
    after each (a Hydra job logs it)."""
    results = cast("dict[str, StageRecord]", dict(done or {}))
    for name in stages:
        if name in results:
            continue
        results[name] = BY_NAME[name](cfg, layout)
        if on_stage is not None:
            on_stage(name, results[name])
    return cast(StageRecords, results)
