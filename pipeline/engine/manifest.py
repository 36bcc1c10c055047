"""The build manifest: everything needed to say what an engine is and whether it
is still current. No timestamps or absolute paths: it is a DVC output."""

from __future__ import annotations

from typing import Any

MANIFEST_VERSION = 1


def make(*, fingerprint: dict, inputs: dict, build_cfg: dict, precision_cfg: dict, profiles: list[dict],
         result: Any, summary: dict, engine_sha256: str, cache_key: str | None = None) -> dict:
    return {
        "manifest_version": MANIFEST_VERSION,
        "cache_key": cache_key,
        "fingerprint": fingerprint,
        "backend": {"flavour": result.flavour, "version": result.trt_version, **result.settings},
        "inputs": inputs,
        "config": {"build": build_cfg, "precision": precision_cfg, "profiles": profiles},
        "engine": {"file": "engine.plan", "bytes": len(result.engine), "sha256": engine_sha256},
        "build_seconds": round(result.seconds, 3),
        "precision": precision_cfg.get("name"),
        "tensorrt": f"{result.flavour} {result.trt_version}",
        "log": log_summary(summary),
        "network_io": result.network_io,
    }


def log_summary(summary: dict) -> dict:
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
