"""Parse, check profiles against the parsed network, build a
strongly typed engine, and keep every log record for the analysis."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PipelineError
from pipeline.engine import backend, build_hints, interrupt, network_inputs, parse_errors
from pipeline.engine.cache_key import plugin_sha256
from pipeline.engine.trt_hooks import (
    Record,
    RecordingLogger,
    make_logger,
    make_progress_monitor,
)
from pipeline.inputs import profiles
from pipeline.records import fingerprint_file
from pipeline.records.build_file import BuildSettings, NetworkIO, TensorIO, WeakTypingSettings
from pipeline.records.fingerprint_file import FingerprintRecord

if TYPE_CHECKING:
    from pipeline.core.config import BuildConfig, PipelineConfig, PrecisionConfig, ProfileConfig
    from pipeline.engine.timing_cache import TimingCache

HW_LEVELS = {"ampere_plus": "AMPERE_PLUS", "same_compute_capability": "SAME_COMPUTE_CAPABILITY"}


@dataclass
class BuildResult:
    engine: bytes | memoryview  # TensorRT's own buffer, see build_engine
    records: list[Record]
    network: list[dict[str, Any]]
    network_io: NetworkIO
    seconds: float
    trt_version: str
    flavour: str
    settings: BuildSettings


# TensorRT ships no type information: its builder, network, config and parser are Any here.
def parse_onnx(
    trt: ModuleType, builder: Any, logger: RecordingLogger, onnx_path: Path, strongly_typed: bool
) -> tuple[Any, Any]:
    network = builder.create_network(backend.network_flags(trt, strongly_typed))
    parser = trt.OnnxParser(network, logger)
    logger.phase = "parse"
    ok = parser.parse_from_file(str(onnx_path))
    if not ok:
        raise PipelineError(parse_errors.describe(trt, parser, onnx_path, logger.errors()))
    return network, parser


def network_layers(trt: ModuleType, network: Any) -> list[dict[str, Any]]:
    layers: list[dict[str, Any]] = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        outs = [layer.get_output(j) for j in range(layer.num_outputs)]
        layers.append(
            {
                "index": i,
                "name": layer.name,
                "type": backend.dtype_name(layer.type),
                "outputs": [
                    {"name": t.name, "dtype": backend.dtype_name(t.dtype), "shape": list(t.shape)}
                    for t in outs
                ],
            }
        )
    return layers


def network_io(network: Any) -> NetworkIO:
    def spec(t: Any) -> TensorIO:
        return {"name": t.name, "dtype": backend.dtype_name(t.dtype), "shape": list(t.shape)}

    return {
        "inputs": [spec(network.get_input(i)) for i in range(network.num_inputs)],
        "outputs": [spec(network.get_output(i)) for i in range(network.num_outputs)],
    }


def configure(
    trt: ModuleType,
    builder: Any,
    network: Any,
    build_cfg: BuildConfig,
    precision_cfg: PrecisionConfig,
    resolved_profiles: list[dict[str, Any]],
) -> Any:
    config = builder.create_builder_config()
    # Per-layer detail in the engine (and, in TensorRT-RTX, in the build log): what
    # the inspect report's fusion table and the EngineInspector read.
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(build_cfg.workspace_mib) << 20)
    config.builder_optimization_level = int(build_cfg.optimization_level)
    if precision_cfg.tf32:
        config.set_flag(trt.BuilderFlag.TF32)
    if build_cfg.version_compatible:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    if getattr(build_cfg, "strip_weights", False):
        _set_strip_weights(trt, config)
    _set_extra_flags(trt, config, build_cfg.extra_flags)
    if build_cfg.hardware_compatibility != "none":
        _set_hardware_compatibility(trt, config, build_cfg.hardware_compatibility)
    if build_cfg.compute_capabilities:
        _set_compute_capabilities(trt, config, build_cfg.compute_capabilities)
    add_profiles(builder, network, config, resolved_profiles)
    return config


def _set_strip_weights(trt: ModuleType, config: Any) -> None:
    # REFIT_IDENTICAL: refitted with the very weights it was built from (the ONNX), so
    # the builder may optimise as for constant weights; plain REFIT would not.
    for name in ("STRIP_PLAN", "REFIT_IDENTICAL"):
        if name not in trt.BuilderFlag.__members__:
            raise PipelineError(
                f"build.strip_weights: {trt.__name__} {trt.__version__} has no {name}; "
                "weight-stripped engines need TensorRT 10+ or TensorRT-RTX"
            )
        config.set_flag(trt.BuilderFlag.__members__[name])


def _set_extra_flags(trt: ModuleType, config: Any, names: Sequence[str]) -> None:
    """build.extra_flags: builder flags by name, each checked against this TensorRT."""
    for name in names:
        if name not in trt.BuilderFlag.__members__:
            raise PipelineError(
                f"build.extra_flags: {name} is not a builder flag of {trt.__name__} "
                f"{trt.__version__}"
            )
        config.set_flag(trt.BuilderFlag.__members__[name])


def _set_hardware_compatibility(trt: ModuleType, config: Any, level: str) -> None:
    if backend.is_rtx(trt):
        raise PipelineError(
            "build.hardware_compatibility is not supported by TensorRT-RTX "
            "(its engines are portable across RTX GPUs already); use none"
        )
    config.hardware_compatibility_level = getattr(trt.HardwareCompatibilityLevel, HW_LEVELS[level])


def _set_compute_capabilities(trt: ModuleType, config: Any, capabilities: Sequence[str]) -> None:
    if not backend.is_rtx(trt):
        raise PipelineError(
            "build.compute_capabilities is a TensorRT-RTX setting; full TensorRT "
            "builds for the GPU it runs on"
        )
    config.num_compute_capabilities = len(capabilities)
    for i, cc in enumerate(capabilities):
        if cc not in trt.ComputeCapability.__members__:
            allowed = ", ".join(k for k in trt.ComputeCapability.__members__ if k.startswith("SM"))
            raise PipelineError(
                f"build.compute_capabilities: unknown {cc}; expected one of {allowed}"
            )
        config.set_compute_capability(trt.ComputeCapability.__members__[cc], i)


def add_profiles(
    builder: Any, network: Any, config: Any, resolved_profiles: list[dict[str, Any]]
) -> None:
    net_inputs = {
        network.get_input(i).name: network.get_input(i) for i in range(network.num_inputs)
    }
    for prof in resolved_profiles:
        unknown = sorted(set(prof["inputs"]) - set(net_inputs))
        if unknown:
            raise PipelineError(
                f"profile '{prof['name']}' names input '{unknown[0]}' which the parsed network "
                f"does not have (inputs: {', '.join(net_inputs)})"
            )
        p = builder.create_optimization_profile()
        for name, tensor in net_inputs.items():
            if name not in prof["inputs"]:
                raise PipelineError(
                    f"profile '{prof['name']}' gives no shape for network input '{name}'"
                )
            network_inputs.set_range(p, prof["name"], tensor, prof["inputs"][name])
        if not p:  # IOptimizationProfile.__bool__ is its own validity check
            raise PipelineError(
                f"TensorRT rejects profile '{prof['name']}' (shapes out of order or wrong rank)"
            )
        config.add_optimization_profile(p)


def load_plugins(trt: ModuleType, builder: Any, paths: list[str]) -> None:
    registry = (
        builder.get_plugin_registry()
        if hasattr(builder, "get_plugin_registry")
        else trt.get_plugin_registry()
    )
    plugin_sha256(paths)  # every library exists before TensorRT tries one
    for path in paths:
        if registry.load_library(str(path)) is None:
            raise PipelineError(f"TensorRT could not load plugin library {path}")


def build_as_configured(
    cfg: PipelineConfig,
    fp: FingerprintRecord,
    onnx_path: Path,
    resolved_profiles: list[dict[str, Any]],
    progress: bool,
    timing_mode: str,
) -> tuple[BuildResult, TimingCache | None]:
    """The engine `cfg` describes, for machine `fp`, with the machine's timing cache used as
    `timing_mode` says (the build stage: as configured; a reproduction: read only)."""
    from pipeline.engine.timing_cache import TimingCache

    tcache = TimingCache.for_fingerprint(cfg.build.store_dir, fp["id"], timing_mode)
    result = build_engine(
        onnx_path,
        cfg.precision,
        cfg.build,
        resolved_profiles,
        fingerprint_file.trt_flavour(fp),
        progress,
        timing_cache=tcache,
    )
    return result, tcache


def build_engine(
    onnx_path: Path,
    precision_cfg: PrecisionConfig,
    build_cfg: BuildConfig,
    resolved_profiles: list[dict[str, Any]],
    flavour: str,
    progress: bool = True,
    timing_cache: TimingCache | None = None,
) -> BuildResult:
    trt = backend.import_flavour(flavour)
    strongly_typed = precision_cfg.mode == "strong"
    if not strongly_typed:
        # Legacy weak typing pulls in numpy and the calibration-data loaders; a strongly
        # typed build (every TensorRT 11 and TensorRT-RTX build) never loads them.
        from pipeline.engine import weak_typing

        weak_typing.refuse_if_strongly_typed_only(trt)
    # From the first TensorRT object to the last one freed (the parse logs as much as the
    # build), a signal must not raise inside a callback: see pipeline/engine/interrupt.py.
    with interrupt.tensorrt_scope() as stop:
        return _parse_and_build(
            trt,
            flavour,
            onnx_path,
            precision_cfg,
            build_cfg,
            resolved_profiles,
            progress,
            timing_cache,
            stop,
        )


def _parse_and_build(
    trt: ModuleType,
    flavour: str,
    onnx_path: Path,
    precision_cfg: PrecisionConfig,
    build_cfg: BuildConfig,
    resolved_profiles: list[dict[str, Any]],
    progress: bool,
    timing_cache: TimingCache | None,
    stop: interrupt.StopFlag,
) -> BuildResult:
    """Every TensorRT call of a build; its TensorRT objects are freed when it returns."""
    strongly_typed = precision_cfg.mode == "strong"
    logger = make_logger(trt)
    builder = trt.Builder(logger)
    load_plugins(trt, builder, list(build_cfg.plugins))
    network, _parser = parse_onnx(trt, builder, logger, onnx_path, strongly_typed)
    layers, io = network_layers(trt, network), network_io(network)
    config = configure(trt, builder, network, build_cfg, precision_cfg, resolved_profiles)
    weak: WeakTypingSettings | None = None
    if not strongly_typed:
        from pipeline.engine import weak_typing

        weak = weak_typing.configure(trt, builder, network, config, onnx_path.parent)
    if timing_cache is not None:
        timing_cache.attach(trt, config)
    logger.phase = "build"
    t0 = time.perf_counter()
    config.progress_monitor = make_progress_monitor(trt, enabled=progress, stop=stop)
    serialized = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - t0
    if serialized is None:
        errors = logger.errors()
        raise BuildFailed(
            f"TensorRT build failed: {errors[-1] if errors else 'no error was logged'}"
            + build_hints.strip_hint(trt, build_cfg, errors)
            + build_hints.control_flow_hint(onnx_path, errors)
            + build_hints.ranks_hint(errors),
            logger.records,
        )
    if timing_cache is not None and not stop.requested:  # a stopped run leaves nothing behind
        timing_cache.save(trt, config)
    settings: BuildSettings = {"strongly_typed": strongly_typed}
    if weak:
        settings["weak_typing"] = weak
    # A view of TensorRT's buffer, not bytes(): no second copy of an engine that can be
    # gigabytes (hashing and writing take any buffer; the view keeps TensorRT's alive).
    return BuildResult(
        engine=memoryview(serialized).cast("B"),
        records=logger.records,
        network=layers,
        network_io=io,
        seconds=seconds,
        trt_version=trt.__version__,
        flavour=flavour,
        settings=settings,
    )


class BuildFailed(PipelineError):
    """A build TensorRT gave up on; carries its log records, which the build step keeps."""

    def __init__(self, line: str, records: list[Record]) -> None:
        super().__init__(line)
        self.records = records


def resolve_profiles(profile_cfg: ProfileConfig, onnx_path: Path) -> list[dict[str, Any]]:
    from pipeline.graph import onnx_model

    # The inputs only: weights in external data stay on disk (TensorRT's parser reads them).
    model = onnx_model.load(onnx_path, check=False, weights=False)
    return profiles.resolve(profile_cfg, onnx_model.inputs(model))
