"""The build stage's records: manifest.json, what an engine is and whether it is still
current (written and read by engine/manifest.py), and what the stage returns beside it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

if TYPE_CHECKING:
    from pipeline.core.engine_sizes import PerParameter
    from pipeline.records.fingerprint_file import FingerprintRecord
    from pipeline.records.inspect_file import Backend


class EngineFile(TypedDict):
    file: str  # a plain name in the build folder: "engine.plan"
    bytes: int
    sha256: str
    stripped: bool
    refit_from: NotRequired[dict[str, str]]  # stripped: the graph whose weights refit it


class BuildConfigUsed(TypedDict):
    build: dict[str, Any]  # the build group, as the cache key read it
    precision: dict[str, Any]  # the precision group; its "name" is the precision
    profiles: list[dict[str, Any]]  # each profile's min/opt/max per input


class LogDigest(TypedDict):
    """manifest.json's `log`: the part of the build-log summary (analysis/buildlog.py) a
    reader of the manifest needs at a glance."""

    counts: dict[str, int]  # log lines by severity
    warnings: list[str]
    errors: list[str]
    layers_original: int | None
    layers_final: int | None
    fusion_ratio: float | None
    fusion_basis: str | None  # None: an older log, not comparable
    engine_precisions: dict[str, int]
    memory: dict[str, Any]  # the builder's reported bytes by kind
    peak_memory_mib: float | None
    timing_cache: list[str]


class Manifest(TypedDict):
    """manifest.json: what an engine is and whether it is still current. `problems()`
    checks the fields its readers rely on (a file a person or another version wrote);
    the optional top-level fields (cache_key, key_inputs, log) may be absent there."""

    manifest_version: int
    cache_key: str | None
    fingerprint: FingerprintRecord
    backend: Backend
    inputs: dict[str, Any]  # onnx_sha256, calibration_sha256, plugins_sha256, tools
    config: BuildConfigUsed
    engine: EngineFile
    build_seconds: float
    precision: str | None
    tensorrt: str  # "<flavour> <version>"
    log: LogDigest
    network_io: dict[str, Any]  # the network's inputs and outputs as TensorRT parsed them
    key_inputs: NotRequired[Mapping[str, Any]]  # the engine key's inputs (the build writes them)
    timing_cache: NotRequired[dict[str, Any]]
    # the image it was built in: the pinned one (pin.build, by reference) and the one this
    # machine ran, as its environment declares it (the fingerprint's container)
    image: NotRequired[dict[str, Any]]


class BuildRecord(Manifest, total=False):
    """What the build stage returns: the manifest, and what this run did (not in the file)."""

    store_event: str  # "hit", "miss, built", ...: a sweep summary's "hit or built"
    peak_rss_mib: float
    # The engine's bytes as a ratio of the fp16 and fp32 engines of the same graph, settings
    # and machine (calibration.json's `engines`): {"fp16": 1.5, "fp32": 1.34}
    against: dict[str, float]
    # The engine's bytes per parameter of its graph against its precision's ideal
    per_parameter: PerParameter
