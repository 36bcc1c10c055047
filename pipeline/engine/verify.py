"""Is an engine current for the present inputs and this machine, and if not, why?
And does rebuilding the same inputs give the same bytes?"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from pipeline.core import hashing
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.engine import cache_key
from pipeline.engine.manifest import load
from pipeline.machine.fingerprint import identity
from pipeline.records.fingerprint_file import FingerprintRecord
from pipeline.store import SHA256, VerifiedStore, regular_file_problem, vouches

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.records.build_file import Manifest


def engine_folder(path: str | Path) -> Path:
    path = Path(path)
    folder = path.parent if path.is_file() else path
    if not (folder / "manifest.json").exists():
        raise PipelineError(
            f"no manifest.json beside {path}; give an engine.plan or its build folder"
        )
    load(folder)  # a damaged manifest is one line here, before any work
    return folder


def engine_intact(folder: Path, manifest: Manifest, store: VerifiedStore | None = None) -> bool:
    """The engine beside a (schema-checked) manifest is a regular file of that folder
    with the bytes the manifest names. With the engine `store`, a hard link to the entry
    the manifest names, whose stat the store recorded as verified, is not read again."""
    name, want = manifest["engine"]["file"], str(manifest["engine"]["sha256"])
    if regular_file_problem(folder, name) is not None:
        return False
    key = manifest.get("cache_key")
    if store is not None and isinstance(key, str) and SHA256.match(key):
        if vouches(store.entries / key, name, folder / name, want):
            return True
    return hashing.sha256_file(folder / name) == want


def adoption_refusal(
    folder: Path, manifest: Manifest, key: str, key_in: Mapping[str, Any]
) -> str | None:
    """Why the engine in `folder` (DVC restored it) must not be adopted as `key`, the
    key of `key_in` (the inputs on this machine); None when it may be. The key is
    recomputed from the engine's own recorded key_inputs, which must also agree with
    what its manifest says it was built from and on; a key written in the file is
    never trusted."""
    recorded = manifest.get("key_inputs")
    if not recorded:
        return "its manifest records no key inputs"
    if manifest.get("cache_key") != cache_key.cache_key(recorded):
        return "its manifest's cache_key is not the key of its own recorded inputs (edited?)"
    if cache_key.cache_key(recorded) != key:
        fields = cache_key.differences(recorded, key_in)
        return (
            f"it was built from other inputs or settings ({', '.join(fields[:4]) or 'key inputs'})"
        )
    config = manifest["config"]
    own = {
        "onnx_sha256": manifest.get("inputs", {}).get("onnx_sha256"),
        "fingerprint": identity(manifest["fingerprint"]),
        "build": cache_key.engine_build_fields(config["build"]),
        "precision": {k: config["precision"].get(k) for k in cache_key.ENGINE_PRECISION_FIELDS},
    }
    if fields := cache_key.differences({k: recorded.get(k) for k in own}, own):
        return f"its recorded key inputs disagree with its own manifest ({', '.join(fields[:4])})"
    if not engine_intact(folder, manifest):
        return f"{manifest['engine']['file']} does not match the sha256 in its manifest"
    return None


def assert_loadable(
    folder: Path, fingerprint: FingerprintRecord, store: VerifiedStore | None = None
) -> Manifest:
    """The manifest, once the engine beside it is shown to be this machine's and
    intact: a runtime never deserializes another machine's or a tampered engine. A
    multi-GB engine linked from the `store` is known intact from the store's record."""
    manifest = load(folder, " (run the build stage)")
    built_for = manifest["fingerprint"]
    if identity(built_for) != identity(fingerprint):
        fields = cache_key.differences(identity(built_for), identity(fingerprint))
        raise PipelineError(
            f"{folder / 'engine.plan'} was built for {built_for.get('id')}, not this machine "
            f"({fingerprint['id']}; differs in {', '.join(fields)}); rebuild it here"
        )
    engine = folder / manifest["engine"]["file"]
    if not engine_intact(folder, manifest, store):
        raise PipelineError(
            f"{engine} does not match the sha256 in its manifest (corrupt, truncated or replaced); "
            f"rerun the build stage"
        )
    return manifest


def refit_source(manifest: Manifest, onnx_path: Path) -> Path | None:
    """None for an engine that holds its weights. A weight-stripped one (build.strip_weights)
    is refitted where it is loaded from `onnx_path`, once that is shown to be the graph it
    was built from: the sha256 its manifest names, external data included."""
    from pipeline.graph import onnx_model

    if not manifest["engine"].get("stripped"):
        return None
    source = manifest["engine"].get("refit_from")
    want = source.get("onnx_sha256") if isinstance(source, dict) else None
    if not onnx_path.is_file():
        raise PipelineError(
            f"the engine is weight-stripped and its weights come from {onnx_path}, which is "
            "missing; rerun the calibrate stage"
        )
    if onnx_model.sha256(onnx_path) != want:
        raise PipelineError(
            f"the engine is weight-stripped and {onnx_path} is not the graph it was built from "
            "(its sha256 differs from the manifest's refit_from); rerun the build stage"
        )
    return onnx_path


def reasons_not_current(
    folder: Path, cfg: PipelineConfig, layout: Layout, fingerprint: FingerprintRecord
) -> list[str]:
    manifest = load(folder)
    engine = folder / manifest["engine"]["file"]
    if (bad := regular_file_problem(folder, engine.name)) is not None:
        return [bad]
    reasons = []
    if not engine_intact(folder, manifest):
        reasons.append(
            f"{engine.name} does not match the sha256 in its manifest (corrupt or replaced)"
        )
    return reasons + input_differences(manifest, cfg, layout, fingerprint)


def input_differences(
    manifest: Manifest, cfg: PipelineConfig, layout: Layout, fingerprint: FingerprintRecord
) -> list[str]:
    """Where the inputs the engine was built from differ from the present ones."""
    built = manifest.get("key_inputs")
    if built is None:
        return ["manifest predates cache keys; rebuild"]
    if not (layout.calibrated_graph).exists():
        return [f"{layout.calibrate_dir / 'model.onnx'} is missing; cannot compare inputs"]
    now = cache_key.engine_key_inputs(cfg, layout, fingerprint, rehash=True)
    return [
        f"{path}: built with {_at(built, path)!r}, now {_at(now, path)!r}"
        for path in cache_key.differences(built, now)
    ]


def _at(d: object, dotted: str) -> object:
    for part in dotted.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


class SameBytes(TypedDict):
    """compare_bytes() of two engines with the same bytes."""

    identical: Literal[True]
    bytes: int


class DifferingRun(TypedDict):
    """Differing bytes less than 8 apart, as one run, and the text around it in each engine."""

    offset: int
    length: int
    a: str  # printable, "." for any other byte
    b: str


class DifferentBytes(TypedDict):
    """compare_bytes() of two engines that differ."""

    identical: Literal[False]
    sizes: list[int]  # a's, b's
    differing_bytes: int  # a size difference counts too
    first_difference: int  # an offset
    runs: list[DifferingRun]  # the first five
    more_runs: int


def compare_bytes(
    a: bytes | memoryview, b: bytes | memoryview, context: int = 24
) -> SameBytes | DifferentBytes:
    """Where two engines differ: counts, the first offset, and printable text
    around each differing run (names and strings are what usually moves)."""
    if a == b:
        return {"identical": True, "bytes": len(a)}
    import numpy as np

    n = min(len(a), len(b))
    diff_offsets = np.flatnonzero(
        np.frombuffer(a, np.uint8, n) != np.frombuffer(b, np.uint8, n)
    ).tolist()
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
        "runs": [
            {
                "offset": s,
                "length": e - s + 1,
                "a": _printable(a[max(0, s - context) : e + context]),
                "b": _printable(b[max(0, s - context) : e + context]),
            }
            for s, e in runs[:5]
        ],
        "more_runs": max(0, len(runs) - 5),
    }


def _printable(chunk: bytes | memoryview) -> str:
    return "".join(chr(c) if 32 <= c < 127 else "." for c in chunk)
