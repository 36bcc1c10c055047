"""Where a built engine stands: its bytes against the fp16 and fp32 engines of the same
graph, settings and machine that the calibrate stage measured (calibration.json's
`engines`, flow/engine_sizes.py). The build stage's table and warning, the report and
summary.json all read it from here, so they say the same."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from pipeline.core import config
from pipeline.core.layout import Layout
from pipeline.records import calibration_file

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.core.engine_sizes import EngineSize, PerParameter
    from pipeline.records.build_file import Manifest


class Standing(TypedDict, total=False):
    against: dict[str, float]  # "fp16", "fp32" -> this engine's bytes over theirs
    references: dict[str, EngineSize]
    measured_with: str
    larger: str  # the line a quantized engine larger than fp16's gets; "" where it is not
    note: str  # why there is nothing to stand against


def standing(cfg: PipelineConfig, layout: Layout, manifest: Manifest) -> Standing:
    """The engine in `manifest` against calibrate's references, where they were measured
    under this engine's build settings, profiles and machine."""
    from pipeline.core import engine_sizes
    from pipeline.engine import cache_key

    if not layout.calibration_summary.is_file():
        return {"note": "no calibration.json"}
    summary = calibration_file.read(layout.calibration_summary)
    record: Mapping[str, Any] = summary.get("engines") or {}
    measured = engine_sizes.measured(record)
    if not measured:
        return {"note": "the fp16 and fp32 engines were not measured (build.reference_engines)"}
    here = cache_key.settings_sha256(
        config.to_dict(cfg.build), config.to_dict(cfg.profile), manifest["fingerprint"]
    )
    if record.get("settings_sha256") != here:
        return {
            "note": "the fp16 and fp32 engines were measured under other build settings or on "
            "another machine; rerun the calibrate stage to stand this engine against them"
        }
    engine_bytes = manifest["engine"]["bytes"]
    quantized = summary.get("transform") in engine_sizes.QUANTIZED
    larger = engine_sizes.larger_line(cfg.precision.name, engine_bytes, measured)
    return {
        "against": engine_sizes.against(engine_bytes, measured),
        "references": measured,
        "measured_with": str(record.get("measured_with", "")),
        "larger": larger if quantized else "",
    }


def per_parameter(cfg: PipelineConfig, layout: Layout, manifest: Manifest) -> PerParameter | None:
    """The engine's bytes per parameter of the graph, against its precision's ideal
    (core/engine_sizes.py); None where calibration.json has no count (an older one)."""
    from pipeline.core import engine_sizes

    if not layout.calibration_summary.is_file():
        return None
    weights = calibration_file.read(layout.calibration_summary).get("weights")
    if not weights:
        return None
    return engine_sizes.per_parameter(
        manifest["engine"]["bytes"], weights, str(cfg.precision.name), int(cfg.precision.block_size)
    )


def text(s: Standing) -> str:
    """One row of a stage table: "1.04x the fp16 engine (2.84 MiB), 0.91x the fp32 …"."""
    from pipeline.core.numbers import MIB

    if "against" not in s:
        return s.get("note", "")
    refs = s["references"]
    return ", ".join(
        f"{ratio:.2f}x the {k} engine ({refs[k]['bytes'] / MIB:.2f} MiB)"
        for k, ratio in s["against"].items()
    )
