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


class TensorIO(TypedDict):
    """A network input or output as TensorRT parsed it (engine/build.network_io)."""

    name: str
    dtype: str
    shape: list[int]  # -1 where the dim is dynamic


class NetworkIO(TypedDict):
    """manifest.json's `network_io`: what a server of the engine feeds and reads."""

    inputs: list[TensorIO]
    outputs: list[TensorIO]


class WeakTypingSettings(TypedDict):
    """What a TensorRT 10 weakly typed build set (engine/weak_typing.configure): manifest.json's
    backend.weak_typing. The calibrator's fields only where it calibrated int8 implicitly."""

    flags: list[str]  # builder flags by name
    calibrator: NotRequired[str]
    calibration_cache: NotRequired[str]  # its path
    calibration_cache_hit: NotRequired[bool]


class BuildSettings(TypedDict):
    """What the builder adds to manifest.json's `backend` beside flavour and version."""

    strongly_typed: bool
    weak_typing: NotRequired[WeakTypingSettings]  # only in a weakly typed build


class TimingCacheOff(TypedDict):
    """manifest.json's `timing_cache` where build.timing_cache=off: no cache was read."""

    mode: str  # "off"


class TimingCacheReport(TypedDict):
    """manifest.json's `timing_cache` of a build that used one (engine/timing_cache.py)."""

    mode: str  # build.timing_cache: "readwrite", "read" or "strict"
    file: str  # a plain name in the engine store's timing folder
    status: str  # what became of it: "loaded", "saved", "not saved: <why>", ...
    # TensorRT reports no hits: the entries before and after, the new ones being the misses
    entries_before: int | None
    entries_after: int | None
    misses: int | None


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
    network_io: NetworkIO
    key_inputs: NotRequired[Mapping[str, Any]]  # the engine key's inputs (the build writes them)
    timing_cache: NotRequired[TimingCacheReport | TimingCacheOff]
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
