"""The engine store: a verified store (pipeline.store) whose entries hold
an engine and its manifest, shared by `dvc repro`, sweeps, every clone and every
experiment workspace of a user, plus the size policy `cache prune` applies."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.core.errors import PipelineError
from pipeline.engine import manifest
from pipeline.store import FileData, VerifiedStore


class EngineStore(VerifiedStore):
    def __init__(self, root: str | Path) -> None:
        super().__init__(root, required=("engine.plan", "manifest.json"), what="engine store")

    def known_sha256(self, files: Mapping[str, FileData]) -> dict[str, str]:
        try:
            engine = json.loads(bytes(files["manifest.json"]))["engine"]
            return (
                {engine["file"]: engine["sha256"]}
                if len(files[engine["file"]]) == engine["bytes"]
                else {}
            )
        except (KeyError, TypeError, ValueError):
            return {}

    def content_problems(self, path: Path, meta: dict[str, Any]) -> list[str]:
        record, bad = manifest.read(path / "manifest.json")
        if record is None:
            return bad
        if record["engine"]["file"] not in meta["files"]:
            return [
                f"manifest.json names engine {record['engine']['file']!r}, which the entry does not hold"
            ]
        if record.get("cache_key") not in (None, path.name):
            return [f"manifest.json names key {str(record['cache_key'])[:16]}"]
        return []


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)\s*")


def parse_size(text: str) -> int:
    """'500M', '2G', '1.5GiB', '100k', '4096B': a size needs a unit, so '5' is not 5 bytes."""
    m = _SIZE.fullmatch(text.lower())
    if not m:
        hint = " (add a unit: B, K, M, G or T)" if re.fullmatch(r"\s*[\d.]+\s*", text) else ""
        raise PipelineError(f"size '{text}' is not a size like 500M or 2G{hint}")
    return int(float(m.group(1)) * 1024 ** "bkmgt".index(m.group(2)[0]))


def prune(store: EngineStore, max_bytes: int, dry_run: bool = False) -> list[str]:
    """Drop least recently used entries until the store fits in max_bytes (entries
    too damaged to size are left to `cache verify --repair`)."""
    entries = [e for e in (store.entry_unverified(k)[0] for k in store.keys()) if e is not None]
    total = sum(e.size for e in entries)
    removed = []
    for e in sorted(entries, key=lambda e: e.last_used):
        if total <= max_bytes:
            break
        if not dry_run:
            store.remove(e.key)
        total -= e.size
        removed.append(e.key)
    return removed
