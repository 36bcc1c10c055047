"""The build manifest: everything needed to say what an engine is and whether it
is still current. No timestamps or absolute paths: it is a DVC output."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pipeline.core.errors import PipelineError
from pipeline.records.build_file import BuildSettings, EngineFile, LogDigest, Manifest, NetworkIO
from pipeline.store import plain_name_problem

if TYPE_CHECKING:
    from pipeline.records.fingerprint_file import FingerprintRecord
    from pipeline.records.inspect_file import Backend

MANIFEST_VERSION = 1


class Built(Protocol):
    """What make() reads of a build: pipeline.engine.build.BuildResult. Not imported, even
    for the type checker: every stage that reads a manifest would depend on the builder."""

    @property
    def engine(self) -> bytes | memoryview: ...
    @property
    def seconds(self) -> float: ...
    @property
    def trt_version(self) -> str: ...
    @property
    def flavour(self) -> str: ...
    @property
    def settings(self) -> BuildSettings: ...
    @property
    def network_io(self) -> NetworkIO: ...


def make(
    *,
    fingerprint: FingerprintRecord,
    inputs: dict[str, Any],
    build_cfg: dict[str, Any],
    precision_cfg: dict[str, Any],
    profiles: list[dict[str, Any]],
    result: Built,
    summary: Mapping[str, Any],
    engine_sha256: str,
    cache_key: str | None = None,
) -> Manifest:
    return {
        "manifest_version": MANIFEST_VERSION,
        "cache_key": cache_key,
        "fingerprint": fingerprint,
        "backend": backend(result),
        "inputs": inputs,
        "config": {"build": build_cfg, "precision": precision_cfg, "profiles": profiles},
        "engine": engine_file(len(result.engine), engine_sha256, build_cfg, inputs),
        "build_seconds": round(result.seconds, 3),
        "precision": precision_cfg.get("name"),
        "tensorrt": f"{result.flavour} {result.trt_version}",
        "log": log_summary(summary),
        "network_io": result.network_io,
    }


def backend(result: Built) -> Backend:
    made: Backend = {"flavour": result.flavour, "version": result.trt_version}
    made.update(result.settings)  # type: ignore[typeddict-item]  # strongly_typed, weak_typing
    return made


def engine_file(
    size: int, sha256: str, build_cfg: dict[str, Any], inputs: dict[str, Any]
) -> EngineFile:
    """A weight-stripped plan names the graph whose weights refit it where it is loaded."""
    made: EngineFile = {"file": "engine.plan", "bytes": size, "sha256": sha256, "stripped": False}
    if build_cfg.get("strip_weights"):
        made["stripped"] = True
        made["refit_from"] = {"onnx_sha256": inputs["onnx_sha256"]}
    return made


def log_summary(summary: Mapping[str, Any]) -> LogDigest:
    """The part of the build-log summary a reader of the manifest needs at a glance."""
    return {
        "counts": summary["counts"],
        "warnings": summary["warnings"],
        "errors": summary.get("errors", []),
        "layers_original": summary["layers_original"],
        "layers_final": summary["layers_final"],
        "fusion_ratio": summary["fusion_ratio"],
        "fusion_basis": summary.get("fusion_basis"),
        "engine_precisions": summary.get("engine_precisions", {}),
        "memory": summary["memory"],
        "peak_memory_mib": summary.get("peak_memory_mib"),
        "timing_cache": summary.get("timing_cache", []),
    }


def problems(manifest: object) -> list[str]:
    """The manifest against the schema its readers rely on (verify, adoption, the
    store, diff, benchmark): [] when it fits. File names must be plain names."""
    if not isinstance(manifest, dict):
        return [
            f"it is {type(manifest).__name__ if manifest is not None else 'null'}, not an object"
        ]
    out: list[str] = []
    engine, fingerprint, config, backend = (
        _section(manifest, n, out) for n in ("engine", "fingerprint", "config", "backend")
    )
    if engine is not None:
        out += _engine_problems(engine)
    out += _fingerprint_problems(fingerprint)
    if config is not None:
        out += _config_problems(config)
    if backend is not None and not all(
        isinstance(backend.get(k), str) for k in ("flavour", "version")
    ):
        out.append("backend.flavour/version are not strings")
    out += _top_level_problems(manifest)
    return out


# Open shape: a section of a file not yet known to be a manifest (problems() is checking it).
def _section(manifest: dict[str, Any], name: str, out: list[str]) -> dict[str, Any] | None:
    """manifest[name] when it is an object; else None, and `out` says so."""
    value = manifest.get(name)
    if not isinstance(value, dict):
        out.append(f"{name} is missing or not an object")
        return None
    return value


def _engine_problems(engine: dict[str, Any]) -> list[str]:
    out = []
    if (bad := plain_name_problem(engine.get("file"), "engine.file")) is not None:
        out.append(bad)
    if type(engine.get("bytes")) is not int:
        out.append("engine.bytes is not an integer")
    if not isinstance(engine.get("sha256"), str):
        out.append("engine.sha256 is not a string")
    if not isinstance(engine.get("stripped", False), bool):
        out.append("engine.stripped is not a boolean")
    return out


def _fingerprint_problems(fingerprint: dict[str, Any] | None) -> list[str]:
    out = []
    if fingerprint is not None and not isinstance(fingerprint.get("id"), str):
        out.append("fingerprint.id is not a string")
    gpu = (fingerprint or {}).get("gpu")
    if gpu is not None and not (
        isinstance(gpu, dict) and {"name", "compute_capability", "memory_mib"} <= set(gpu)
    ):
        out.append("fingerprint.gpu is neither null nor a GPU")
    return out


def _config_problems(config: dict[str, Any]) -> list[str]:
    out = []
    for name, kind in (("build", dict), ("precision", dict), ("profiles", list)):
        if not isinstance(config.get(name), kind):
            out.append(f"config.{name} is not {'an object' if kind is dict else 'a list'}")
    if isinstance(config.get("precision"), dict) and not isinstance(
        config["precision"].get("name"), str
    ):
        out.append("config.precision.name is not a string")
    return out


def _top_level_problems(manifest: dict[str, Any]) -> list[str]:
    """The optional top-level fields, when present."""
    out = []
    if not isinstance(manifest.get("cache_key"), (str, type(None))):
        out.append("cache_key is not a string")
    if not isinstance(manifest.get("key_inputs", {}), dict):
        out.append("key_inputs is not an object")
    if not isinstance(manifest.get("log", {}), dict):
        out.append("log is not an object")
    return out


def read(path: str | os.PathLike[str]) -> tuple[Manifest | None, list[str]]:
    """(manifest, []) when path holds a well-formed manifest, else (None, why not)."""
    try:
        manifest = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None, ["manifest.json missing"]
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None, ["manifest.json is not valid JSON"]
    except OSError as e:
        return None, [f"manifest.json unreadable ({e.strerror})"]
    bad = problems(manifest)
    return (None, [f"manifest.json: {'; '.join(bad)}"]) if bad else (manifest, [])


def load(folder: str | os.PathLike[str], hint: str = "") -> Manifest:
    """The manifest of a build folder, or one PipelineError line saying what is wrong."""
    path = Path(folder) / "manifest.json"
    manifest, bad = read(path)
    if manifest is None:
        if not path.exists():
            raise PipelineError(f"build manifest not found: {path}{hint}")
        raise PipelineError(
            f"{path} is not a build manifest ({bad[0].removeprefix('manifest.json: ')})"
        )
    return manifest
