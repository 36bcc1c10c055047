"""Is every output before this stage current for the present params and this machine?
Link by link: model bytes -> export -> precision transform -> engine -> this machine.
inspect and benchmark refuse to run otherwise; `verify` lists every broken link."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import provenance
from pipeline.records import export_file
from pipeline.records.fingerprint_file import FingerprintRecord

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.records.build_file import Manifest


def chain_reasons(cfg: PipelineConfig, layout: Layout) -> list[str]:
    """Why the outputs before the engine are not current for `cfg`, link by link:
    model bytes -> export -> precision transform. [] when every link holds."""
    from pipeline.export import export

    reasons: list[str] = []
    for stage, folder in (("export", layout.export_dir), ("calibrate", layout.calibrate_dir)):
        try:
            rec = provenance.require(folder, cfg, stage)
        except PipelineError as e:
            return [*reasons, str(e)]
        if stage == "export":
            try:
                now = export.source_sha256(cfg.model)
            except PipelineError as e:
                return [*reasons, f"model: {e}"]
            if rec.get("model_sha256") != now:
                reasons.append(
                    f"model: its bytes changed since the export ({_source(cfg)}); rerun the export stage"
                )
            exported = export_file.read(layout.export_dir)["onnx_sha256"]
        elif rec.get("source_sha256") != exported:
            reasons.append(
                "calibrate: made from another export than artifacts/export; rerun the calibrate stage"
            )
    return reasons


def _source(cfg: PipelineConfig) -> str | None:
    return cfg.model.onnx_path or cfg.model.factory


def current(cfg: PipelineConfig, layout: Layout, fp: FingerprintRecord) -> Manifest:
    """For inspect and benchmark: export, calibrate and the engine all belong to the
    present params and this machine; the manifest of that engine."""
    from pipeline.engine import verify
    from pipeline.engine.store import EngineStore
    from pipeline.store import ENGINES

    provenance.require(layout.export_dir, cfg, "export")
    provenance.require(layout.calibrate_dir, cfg, "calibrate")
    engine_dir = layout.engine_dir(fp["id"])
    store = EngineStore(ENGINES.root(cfg.build.store_dir))
    manifest = verify.assert_loadable(engine_dir, fp, store)  # this machine's, and intact
    reasons = verify.input_differences(manifest, cfg, layout, fp)
    if reasons:
        raise PipelineError(
            f"{engine_dir} is not the engine of the present params ({reasons[0]}); "
            f"rerun the build stage (dvc repro)"
        )
    return manifest
