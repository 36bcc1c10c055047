"""The engine cache key: sha256 over everything that decides an engine's bytes and
where it may run, and nothing else. Tools keyed on a file name, or that leave out
the weights, the GPU or the TensorRT version, serve wrong engines; this does not.

Kept import-light: the engine store's hit path computes it without TensorRT,
onnx or numpy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, Required, TypedDict, cast

from pipeline.core import hashing
from pipeline.core.errors import PipelineError
from pipeline.machine.fingerprint import FingerprintIdentity, identity
from pipeline.records import calibration_file
from pipeline.records.fingerprint_file import FingerprintRecord

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.core.layout import Layout

# 2: engines carry DETAILED profiling verbosity.
KEY_VERSION = 2
# Build settings that change the engine. store_dir, gates, log redactions and the
# timing-cache mode change where it is kept or whether it is accepted, not its bytes.
ENGINE_BUILD_FIELDS = (
    "workspace_mib",
    "optimization_level",
    "hardware_compatibility",
    "version_compatible",
    "compute_capabilities",
    "extra_flags",
)
# The graph already carries the precision transform; these are what the builder adds.
ENGINE_PRECISION_FIELDS = ("mode", "tf32")
# Settings added later, in the key only when on, so every engine stored before keeps its key.
ENGINE_BUILD_FIELDS_WHEN_SET = ("strip_weights",)


class EngineBuildFields(TypedDict):
    """The build settings in the key: ENGINE_BUILD_FIELDS, and those of
    ENGINE_BUILD_FIELDS_WHEN_SET where on. None where the recorded config of an older
    manifest has no such field."""

    workspace_mib: int | None
    optimization_level: int | None
    hardware_compatibility: str | None  # the choice's name: "none", "ampere_plus", ...
    version_compatible: bool | None
    compute_capabilities: list[str] | None
    extra_flags: list[str] | None
    strip_weights: NotRequired[bool]


def engine_build_fields(build_cfg: dict[str, Any]) -> EngineBuildFields:
    """The build settings in the key (of a config, or of a manifest's recorded one)."""
    fields = {k: build_cfg.get(k) for k in ENGINE_BUILD_FIELDS}
    # the field lists above decide what the key holds; the type only names it
    return cast(
        EngineBuildFields,
        fields | {k: build_cfg[k] for k in ENGINE_BUILD_FIELDS_WHEN_SET if build_cfg.get(k)},
    )


class ProfileFields(TypedDict, total=False):
    """What of the profile group is in the key (profile_fields)."""

    profiles: Required[list[dict[str, Any]]]  # the profile group's as configured
    profile_shapes: dict[str, Any]  # profile.shapes, where set
    profile_decoder: dict[str, Any]  # profile.decoder, where set


class KeyInputs(ProfileFields, total=False):
    """Everything the engine key hashes (manifest.json keeps it as `key_inputs`). The
    precision group is open on purpose: it holds the fields ENGINE_PRECISION_FIELDS names."""

    key_version: Required[int]
    onnx_sha256: Required[str]
    build: Required[EngineBuildFields]
    precision: Required[dict[str, Any]]
    calibration_sha256: Required[str | None]
    plugins_sha256: Required[list[str]]
    fingerprint: Required[FingerprintIdentity]


def key_inputs(
    *,
    onnx_sha256: str,
    build_cfg: dict[str, Any],
    precision_cfg: dict[str, Any],
    profile_cfg: dict[str, Any],
    calibration_sha256: str | None,
    plugin_sha256: dict[str, str],
    fingerprint: FingerprintRecord,
) -> KeyInputs:
    return {
        "key_version": KEY_VERSION,
        "onnx_sha256": onnx_sha256,
        "build": engine_build_fields(build_cfg),
        "precision": {k: precision_cfg[k] for k in ENGINE_PRECISION_FIELDS},
        **profile_fields(profile_cfg),
        "calibration_sha256": calibration_sha256,
        # Plugins by content: a rebuilt .so with the same name is a different engine.
        "plugins_sha256": sorted(plugin_sha256.values()),
        "fingerprint": identity(fingerprint),
    }


def profile_fields(profile_cfg: dict[str, Any]) -> ProfileFields:
    """What of the profile group shapes an engine: its profiles, and profile.shapes and
    profile.decoder where set (each resizes the profiles the build resolves; they are
    in the key only where set, so the keys of configs without them stay as they were)."""
    out: ProfileFields = {"profiles": profile_cfg["profiles"]}
    if profile_cfg.get("shapes"):
        out["profile_shapes"] = profile_cfg["shapes"]
    decoder = profile_cfg.get("decoder") or {}
    if decoder.get("max_seq_len"):
        out["profile_decoder"] = decoder
    return out


def settings_sha256(
    build_cfg: dict[str, Any], profile_cfg: dict[str, Any], fingerprint: FingerprintRecord
) -> str:
    """Everything an engine key holds besides the graph: engines measured under one digest
    compare with an engine built under the same one (flow/engine_sizes.py, the build stage)."""
    return hashing.sha256_json(
        {
            "build": engine_build_fields(build_cfg),
            "plugins": sorted(build_cfg.get("plugins") or []),
            **profile_fields(profile_cfg),
            "fingerprint": identity(fingerprint),
        }
    )


def plugin_sha256(paths: Iterable[str]) -> dict[str, str]:
    """Plugin libraries by content; a missing one is the user's error, named once here."""
    out = {}
    for p in paths:
        if not Path(p).is_file():
            raise PipelineError(f"plugin library not found: {p}")
        out[Path(p).name] = hashing.sha256_file(p)
    return out


def calibration_result_sha256(layout: Layout) -> str | None:
    """Implicit (TensorRT 10) int8 calibration happens inside the build, so the
    engine depends on its inputs and calibrator; Q/DQ calibration lives in the
    graph, which the ONNX hash covers already."""
    inputs = layout.weak_calibration_inputs
    if not inputs.exists():
        return None
    summary = calibration_file.read(layout.calibration_summary)
    calibrator = summary.get("weak_typing", {}).get("calibrator", "")
    return hashing.sha256_bytes(f"{hashing.sha256_file(inputs)}|{calibrator}".encode())


def engine_key_inputs(
    cfg: PipelineConfig, layout: Layout, fp: FingerprintRecord, rehash: bool = False
) -> KeyInputs:
    """The key inputs of the engine `cfg` builds from layout's calibrated graph on `fp`.
    The graph's hash is the one calibrate recorded while the file is unchanged since;
    `rehash` reads it again (verify trusts no record)."""
    from pipeline.core import config
    from pipeline.graph import onnx_model

    graph = layout.calibrated_graph
    if rehash:
        graph_sha256 = onnx_model.sha256(graph)
    else:
        summary = calibration_file.read(layout.calibration_summary)
        graph_sha256 = onnx_model.recorded_sha256(
            graph, summary["onnx_sha256"], summary.get("onnx_files")
        )
    return key_inputs(
        onnx_sha256=graph_sha256,
        build_cfg=config.to_dict(cfg.build),
        precision_cfg=config.to_dict(cfg.precision),
        profile_cfg=config.to_dict(cfg.profile),
        calibration_sha256=calibration_result_sha256(layout),
        plugin_sha256=plugin_sha256(cfg.build.plugins),
        fingerprint=fp,
    )


def cache_key(inputs: Mapping[str, Any] | None) -> str:
    # None (a manifest that records no key inputs) hashes too, and matches no real key.
    return hashing.sha256_json(inputs)


def differences(old: object, new: object, prefix: str = "") -> list[str]:
    """Dotted paths where two key-input records differ, for `verify` to say why."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            out += differences(old.get(k), new.get(k), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if old == new else [prefix or "<root>"]
