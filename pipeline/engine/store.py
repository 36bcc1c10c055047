"""The engine store: a verified store (pipeline.core.verified_store) whose entries hold
an engine and its manifest, shared by `dvc repro`, sweeps and every clone, plus the
size policy `cache prune` applies."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pipeline.core.errors import PipelineError
from pipeline.core.verified_store import ENTRY_FILE, LAST_USED, Entry, VerifiedStore  # noqa: F401 (re-exported)


def default_root(store_dir: str | None = None) -> Path:
    return Path(store_dir or os.environ.get("TRT_PIPELINE_STORE") or Path(".cache") / "engines")


class EngineStore(VerifiedStore):
    def __init__(self, root: str | Path) -> None:
        super().__init__(root, required=("engine.plan", "manifest.json"), what="engine store")


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([kmgt]?)(i?b)?\s*", text.lower())
    if not m:
        raise PipelineError(f"size '{text}' is not a size like 500M or 2G")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " "))


def prune(store: EngineStore, max_bytes: int) -> list[str]:
    """Drop least recently used entries until the store fits in max_bytes."""
    entries = [e for e in (store.entry_unverified(k) for k in store.keys()) if e is not None]
    total = sum(e.size for e in entries)
    removed = []
    for e in sorted(entries, key=lambda e: e.last_used):
        if total <= max_bytes:
            break
        store.remove(e.key)
        total -= e.size
        removed.append(e.key)
    return removed
