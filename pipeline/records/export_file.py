"""export.json, the export stage's record of the graph it wrote: where it came from, its
inputs and outputs, the sample layout calibration batches by, and where the reference
inputs came from. Written and read here only (see core/json_record.py)."""

# No `from __future__ import annotations`: the TypedDicts' Required[] are evaluated at class
# creation, as the reader's field check needs.
from pathlib import Path
from typing import Any, NotRequired, Required, TypedDict, cast

from pipeline.core.engine_sizes import WeightCounts
from pipeline.core.errors import PipelineError
from pipeline.core.json_record import JsonRecord
from pipeline.core.layout import EXPORT_SUMMARY
from pipeline.records.calibration_file import InputSpec


class SampleAxes(TypedDict):
    shapes: dict[str, list[int]]  # input -> one sample's shape (the profile's opt dims)
    axes: dict[str, int | None]  # input -> the axis samples stack on; None: not batched


class ReferenceSource(TypedDict):
    """export.json's `reference`: where the reference inputs came from, and what of that a
    report shows. Each source has its own fields; "unknown" where no export.json is."""

    source: str  # "folder", "factory", "random", "prompts" or "unknown"
    random: bool | None  # None: unknown
    path: NotRequired[str]  # folder, prompts
    samples: NotRequired[int]  # folder
    sha256: NotRequired[str]  # folder, prompts: the data's content
    sampler: NotRequired[str]  # factory: "<factory>.sample_inputs"
    note: NotRequired[str]  # random: the warning that gate and benchmark say little
    # random: what each input is drawn from, a [low, high] or a distribution's name
    ranges: NotRequired[dict[str, list[float | None] | str]]
    prompts: NotRequired[int]
    decode_steps: NotRequired[int]
    batches: NotRequired[dict[str, int]]  # prompts: by phase, prefill and decode
    truth: NotRequired[str]  # why, where the fp32 truth is the normalised graph's


class ExportRecord(TypedDict, total=False):
    source: Required[str]  # "factory:<name>" or "onnx:<file name>"
    onnx_sha256: Required[str]
    inputs: Required[list[InputSpec]]
    outputs: Required[list[InputSpec]]
    opset: int
    parameters: int
    weights: WeightCounts
    nodes: int
    reference_batches: int
    samples: SampleAxes
    # a ReferenceSource, kept open while its makers (inputs/sample_data.py and
    # inputs/decoder_runs.py) return plain dicts
    reference: dict[str, Any]
    normalized: list[str]  # what normalising the user's file changed
    peak_rss_mib: float  # the stage's return only


RECORD = JsonRecord("export summary", "the export stage", ExportRecord)


def write(folder: Path, summary: ExportRecord) -> Path:
    return RECORD.write(folder / EXPORT_SUMMARY, summary)


def read(folder: Path) -> ExportRecord:
    return RECORD.read(folder / EXPORT_SUMMARY)


def reference_info(folder: Path) -> ReferenceSource:
    """Where the export's reference inputs came from; unknown where no export.json is."""
    unknown: ReferenceSource = {"source": "unknown", "random": None}
    if not (Path(folder) / EXPORT_SUMMARY).exists():
        return unknown
    return cast(ReferenceSource, read(folder).get("reference", unknown))


def weights(folder: Path) -> WeightCounts | None:
    """The graph's parameter count the export recorded; None from an older export.json."""
    if not (Path(folder) / EXPORT_SUMMARY).exists():
        return None
    return read(folder).get("weights")


def sample_axes(folder: Path) -> SampleAxes:
    """The sample inputs' shapes and the axes they stack on, as the export recorded them:
    what calibration batches and the verdict splits by."""
    got: Any = read(folder).get("samples")
    if not isinstance(got, dict) or not isinstance(got.get("shapes"), dict):
        raise PipelineError(
            f"{Path(folder) / EXPORT_SUMMARY} has no sample layout (made by an older "
            f"version); rerun the export stage"
        )
    shapes = {str(k): [int(d) for d in v] for k, v in got["shapes"].items()}
    axes = {str(k): None if v is None else int(v) for k, v in (got.get("axes") or {}).items()}
    return SampleAxes(shapes=shapes, axes=axes)
