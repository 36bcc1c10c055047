"""Writing one file into a verified store's entry: each byte is read once, and the sha256
is computed on the way (a multi-GB file is never read a second time to hash it)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pipeline.core import fileio, hashing
from pipeline.store._entry import LARGE_BYTES, FileData, FileOnDisk

CHUNK = 16 << 20


def write(data: FileData, dest: Path) -> str | None:
    """Write `data` to `dest` (a new file in the entry's tmp folder). A file on disk is
    copied in chunks, each hashed as it passes: its sha256 is returned. Bytes in memory
    are written as they are (None: hashing them needs no read, and a PendingFiles' manifest
    may name their digest already). Large files are not fsynced: see LARGE_BYTES."""
    if not isinstance(data, FileOnDisk):
        fileio.write_bytes(dest, data, fsync=len(data) < LARGE_BYTES)
        return None
    h = hashlib.sha256()
    buf = memoryview(bytearray(CHUNK))
    with open(data.path, "rb") as src, open(dest, "xb") as out:
        os.fchmod(out.fileno(), fileio.file_mode())
        while n := src.readinto(buf):
            h.update(buf[:n])
            out.write(buf[:n])
        if out.tell() < LARGE_BYTES:
            out.flush()
            os.fsync(out.fileno())
    return h.hexdigest()


def sha256(data: FileData) -> str:
    """The digest of bytes `write` did not hash (memory is hashed without a read)."""
    if isinstance(data, FileOnDisk):
        return hashing.sha256_file(data.path)
    return hashing.sha256_bytes(data)
