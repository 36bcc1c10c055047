"""Is an engine current for the present inputs and this machine, and if not, why?
And does rebuilding the same inputs give the same bytes?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.engine import cache_key as key_lib
from pipeline.core import fileio, hashing
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout


def engine_folder(path: str | Path) -> Path:
    path = Path(path)
    folder = path.parent if path.is_file() else path
    if not (folder / "manifest.json").exists():
        raise PipelineError(f"no manifest.json beside {path}; give an engine.plan or its build folder")
    return folder


def engine_intact(folder: Path, manifest: dict) -> bool:
    """The engine beside a manifest exists and has the bytes the manifest names."""
    engine = folder / manifest["engine"]["file"]
    return engine.exists() and hashing.sha256_file(engine) == manifest["engine"]["sha256"]


def assert_loadable(folder: Path, fingerprint: dict) -> dict:
    """The manifest, once the engine beside it is shown to be this machine's and
    intact: a runtime never deserializes another machine's or a tampered engine."""
    from pipeline.machine.fingerprint import identity

    manifest = fileio.read_json(folder / "manifest.json", "build manifest (run the build stage)")
    built_for = manifest.get("fingerprint", {})
    if identity(built_for) != identity(fingerprint):
        fields = key_lib.differences(identity(built_for), identity(fingerprint))
        raise PipelineError(f"{folder / 'engine.plan'} was built for {built_for.get('id')}, not this machine "
                            f"({fingerprint['id']}; differs in {', '.join(fields)}); rebuild it here")
    engine = folder / manifest["engine"]["file"]
    if not engine_intact(folder, manifest):
        raise PipelineError(f"{engine} does not match the sha256 in its manifest (corrupt, truncated or replaced); "
                            f"rerun the build stage")
    return manifest


def reasons_not_current(folder: Path, cfg: Any, layout: Layout, fingerprint: dict) -> list[str]:
    manifest = fileio.read_json(folder / "manifest.json", "build manifest")
    engine = folder / manifest["engine"]["file"]
    reasons = []
    if not engine.exists():
        return [f"{engine.name} is missing"]
    if not engine_intact(folder, manifest):
        reasons.append(f"{engine.name} does not match the sha256 in its manifest (corrupt or replaced)")
    built = manifest.get("key_inputs")
    if built is None:
        return reasons + ["manifest predates cache keys; rebuild"]
    if not (layout.calibrate_dir / "model.onnx").exists():
        return reasons + [f"{layout.calibrate_dir / 'model.onnx'} is missing; cannot compare inputs"]
    now = key_lib.engine_key_inputs(cfg, layout, fingerprint)
    for path in key_lib.differences(built, now):
        reasons.append(f"{path}: built with {_at(built, path)!r}, now {_at(now, path)!r}")
    return reasons


def _at(d: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def compare_bytes(a: bytes, b: bytes, context: int = 24) -> dict:
    """Where two engines differ: counts, the first offset, and printable text
    around each differing run (names and strings are what usually moves)."""
    if a == b:
        return {"identical": True, "bytes": len(a)}
    import numpy as np

    n = min(len(a), len(b))
    diff_offsets = np.flatnonzero(np.frombuffer(a, np.uint8, n) != np.frombuffer(b, np.uint8, n)).tolist()
    runs: list[list[int]] = []
    for i in diff_offsets:
        if runs and i - runs[-1][1] <= 8:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return {
        "identical": False,
        "sizes": [len(a), len(b)],
        "differing_bytes": len(diff_offsets) + abs(len(a) - len(b)),
        "first_difference": diff_offsets[0] if diff_offsets else n,
        "runs": [{"offset": s, "length": e - s + 1,
                  "a": _printable(a[max(0, s - context): e + context]),
                  "b": _printable(b[max(0, s - context): e + context])} for s, e in runs[:5]],
        "more_runs": max(0, len(runs) - 5),
    }


def _printable(chunk: bytes) -> str:
    return "".join(chr(c) if 32 <= c < 127 else "." for c in chunk)
