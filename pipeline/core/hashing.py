"""The one way this tool hashes: files and bytes by sha256, records by sha256 over
canonical JSON (sorted keys). Cache keys, calibration keys and fingerprint ids all
come from here, so two records that are equal always hash equal."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

# Fingerprint ids were first hashed with json.dumps' default ", " / ": " spacing and
# keys with the compact one; both are kept byte for byte, so every engine folder and
# store entry made before this module existed is still found.
COMPACT = (",", ":")
SPACED = (", ", ": ")


def canonical_json(obj: Any, separators: tuple[str, str] = COMPACT) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=separators).encode()


def sha256_json(obj: Any, separators: tuple[str, str] = COMPACT) -> str:
    return hashlib.sha256(canonical_json(obj, separators)).hexdigest()


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
