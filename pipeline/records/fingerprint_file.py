"""artifacts/fingerprint.json, the fingerprint stage's record: what decides which machines
an engine is valid for, and the store folder it names."""

# No `from __future__ import annotations`: the record's annotations are evaluated at class
# creation, as the record readers need (see core/json_record.py).
from pathlib import Path
from typing import Any, Required, TypedDict

from pipeline.core.errors import PipelineError
from pipeline.core.json_record import JsonRecord


class FingerprintRecord(TypedDict, total=False):
    """artifacts/fingerprint.json (pipeline/machine/fingerprint.collect): what decides which
    machines an engine is valid for, and `id`, the store folder it names. collect() writes
    every field; the reader checks those the stages rely on."""

    id: Required[str]  # "<gpu or nogpu>-<flavour><version>-<hash of the identity fields>"
    target: Required[str]  # "NVIDIA H100 (sm 9.0)" or "no GPU"
    gpu: Required[dict[str, Any] | None]  # name, compute_capability, memory_mib, pci ids, ...
    trt_flavour: Required[str | None]  # None: no TensorRT here (`fingerprint` on a bare host)
    trt_version: Required[str | None]
    gpu_probe: str
    driver_version: str | None
    cuda_driver_version: str | None
    cuda_runtime_version: str | None
    cuda_runtime_source: str
    trt_distribution: str | None
    trt_choice: str
    hardware_compatibility: str
    version_compatible: bool
    # the NGC image this ran in, as its environment declares it (core/ngc.container): release,
    # TensorRT, CUDA, build id, digest; None outside one. Recorded, not part of the identity:
    # the engine key holds the full TensorRT version already
    container: dict[str, str] | None


FINGERPRINT = JsonRecord("fingerprint", "the fingerprint stage", FingerprintRecord)


def read(path: Path) -> FingerprintRecord:
    return FINGERPRINT.read(path)


def trt_flavour(fp: FingerprintRecord) -> str:
    """The TensorRT flavour this machine builds and runs with; a fingerprint taken where
    none is installed (`trt-pipeline fingerprint` on a bare host) cannot build."""
    if fp["trt_flavour"] is None:
        raise PipelineError(
            f"fingerprint {fp['id']} names no TensorRT ({fp['trt_choice']}); install one and "
            f"rerun the fingerprint stage"
        )
    return fp["trt_flavour"]
