"""The package stage: a Triton model repository (repository/<model.name>/) of the engines
built in this checkout, one per machine fingerprint (pipeline/serve/repository.py), with a
warm-up sample from the export's reference inputs. `trt-pipeline package` runs the same
with its own flags (another name or folder, the fleet's engines from the store, Triton's
schema from a wheel)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core import console
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout, model_name_problem
from pipeline.records import fingerprint_file

if TYPE_CHECKING:
    import numpy as np

    from pipeline.core.config import PipelineConfig
    from pipeline.core.config_pin import PinConfig
    from pipeline.records.package_file import PackageRecord


def run(cfg: PipelineConfig, layout: Layout) -> PackageRecord:
    # one model of several is served under its key, as dvc.yaml's repository/<model> out
    return package(layout, layout.model or cfg.model.name, layout.repository, pin=cfg.pin)


def package(
    layout: Layout,
    name: str,
    out: Path,
    store_root: Path | None = None,
    schema: Path | None = None,
    pin: PinConfig | None = None,
) -> PackageRecord:
    """repository `out`/`name` of the engines in layout's artifacts/build (and, with
    `store_root`, every machine's engine of the same graph in that store); its table. With
    `pin`, a plan the pinned serving image cannot load is refused, and the image named."""
    from pipeline.core import ngc
    from pipeline.serve import repository

    if problem := model_name_problem(name):
        raise PipelineError(f"package: {problem}")
    # this machine's engine names the graph; a checkout that never built here takes one
    current = (
        fingerprint_file.read(layout.fingerprint)["id"] if layout.fingerprint.is_file() else None
    )
    engines = repository.engines_in(layout.build_dir, current)
    if store_root is not None:
        engines = repository.with_store(engines, store_root)
    serve = ngc.pinned(pin, "serve") if pin is not None else None
    done = repository.write(out, name, engines, schema, _reference_sample(layout), serve)
    batch = done["max_batch_size"]
    console.table(
        f"package: {name}",
        [
            ("repository", str(out / name)),
            ("GPU kinds", ", ".join(sorted({e.gpu or "no GPU (portable)" for e in engines}))),
            *[(f"sm {cc}", plan) for cc, plan in done["plans"].items()],
            ("max_batch_size", str(batch) if batch else "0 (no batch dim: full dims)"),
            ("served by", str(serve) if serve else "not pinned (pin.serve): see serving.txt"),
            *[("checked", line) for line in done["checked"]],
        ],
    )
    return done


def _reference_sample(layout: Layout) -> dict[str, np.ndarray] | None:
    """The export's first reference batch of inputs, for model_warmup; None without one."""
    from pipeline.inputs import reference_file

    if not layout.reference.is_file():
        return None
    return dict(reference_file.read(layout.reference)[0][0])
