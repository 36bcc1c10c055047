"""This machine's engine folder (`artifacts/build/<fingerprint>/`) and the engine store:
serve an entry into the folder, adopt an engine DVC pulled into it, label an entry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from pipeline.core import console, fileio, memory
from pipeline.core.errors import Interrupted
from pipeline.records.fingerprint_file import FingerprintRecord
from pipeline.store import FileData, FileOnDisk, Outcome, VerifiedStore

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig

# What the store's get_or_make calls on a miss: the entry's files, its labels, the event.
Make: TypeAlias = Callable[[], tuple[Mapping[str, FileData], dict[str, Any], str]]


def served(store: VerifiedStore, key: str, folder: Path, make: Make) -> Outcome:
    """The entry for `key` in the engine folder: served from the store, or made and stored."""
    try:
        return serve_into(folder, store, key, make)
    except (KeyboardInterrupt, Interrupted):
        # A signal after the store's commit interrupts this stage, not the build: the
        # entry is whole (written, hashed, renamed in one step) and the next run serves it.
        if store.entry_unverified(key)[0] is not None:
            console.note(
                f"engine store: the signal came after engine {key[:16]} was stored whole; "
                "the next run serves it"
            )
        raise


def serve_into(folder: Path, store: VerifiedStore, key: str, make: Make) -> Outcome:
    """The store's entry for `key` (made by `make` on a miss) copied into this machine's folder."""
    got = store.get_or_make(key, make)
    try:
        copy_entry(got, folder)
    except FileNotFoundError:
        if not got.hit:
            raise
        # A hit's entry can vanish under `cache rm`/`prune`: look again, once.
        got = store.get_or_make(key, make)
        copy_entry(got, folder)
    return got


def copy_entry(got: Outcome, folder: Path) -> None:
    # Only this machine's folder is replaced: artifacts/build keeps one folder per
    # fingerprint (a persistent DVC output), so engines for other GPUs travel too.
    if got.hit and not memory.same_filesystem(got.served.path, folder):
        # a hard link cannot cross filesystems: the entry is copied
        memory.require_disk(folder, got.served.size, "a copy of the stored engine")
    with fileio.staged_dir(folder) as out:
        for name in got.names:
            got.copy_to(name, out / name)


def adopt_pulled(folder: Path, key: str, key_in: Mapping[str, Any]) -> dict[str, FileData] | None:
    """The files of an engine DVC pulled or kept for this fingerprint, when the key
    recomputed from its own recorded inputs is the key being built and its bytes
    are intact; None (with a warning when something was there) otherwise."""
    from pipeline.engine import cache_key, manifest
    from pipeline.engine.verify import adoption_refusal

    if not (folder / "manifest.json").exists():
        return None
    record, bad = manifest.read(folder / "manifest.json")
    if record is not None and key not in (
        record.get("cache_key"),
        cache_key.cache_key(record.get("key_inputs")),
    ):
        return None  # an engine of other inputs (an earlier config): nothing claims otherwise
    why = bad[0] if record is None else adoption_refusal(folder, record, key, key_in)
    if why is not None:
        console.warn(f"not adopting {folder / 'engine.plan'}: {why}; building it")
        return None
    # Left on disk: the store copies each file once, hashing it on the way, never
    # holding a multi-GB engine in memory.
    return {
        p.name: FileOnDisk(p)
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.is_symlink()
    }


def store_labels(cfg: PipelineConfig, fp: FingerprintRecord) -> dict[str, str]:
    """What `cache ls` shows to tell entries apart (the key decides; these explain)."""
    gpu = fp["gpu"]["name"] if fp["gpu"] else "no GPU"
    prec, calib = cfg.precision, cfg.calibration
    calibrated = prec.transform == "qdq" or (prec.mode == "weak" and prec.name == "int8")
    # What stays in higher precision: Q/DQ exclusions, or the nodes AutoCast keeps in fp32.
    kept = (
        [*calib.exclude_op_types, *calib.exclude_nodes]
        if prec.transform == "qdq"
        else [*prec.keep_fp32_op_types, *prec.keep_fp32_nodes]
        if prec.transform == "autocast"
        else []
    )
    return {
        "model": cfg.model.name,
        "precision": prec.name,
        "gpu": gpu,
        "trt": f"{fp['trt_flavour']} {fp['trt_version']}",
        "fingerprint": fp["id"],
        "profile": cfg.profile.name,
        "calibration": f"{calib.name} ({calib.method})" if calibrated else "-",
        "fallback": ", ".join(kept) or "-",
    }
