"""What each file of a store entry looked like when it was last known whole, so a hit on
a multi-GB entry costs a few stat calls instead of a re-hash of every byte.

A file is trusted without reading it while its (size, mtime_ns, inode) are the ones
recorded after its sha256 was checked (or after it was written from the bytes that were
hashed). Whatever changes the bytes changes that: a write sets mtime, a truncation the
size, a replacement the inode. Two races are closed:
- a write in the same clock tick as the check (mtimes are coarse: up to 2 s on some
  filesystems): a file is only recorded when its mtime is older than the check by more
  than that, and the store dates the files it writes 10 s back, so any later write gives
  them a newer mtime;
- a power cut: the store writes large files without fsync (a rebuild is the cost, never
  a wrong engine), so the record holds for one boot of one host; after a reboot each file
  is hashed once more.
Not caught: bytes put back in place with the old size and a forged mtime (touch -d);
`cache verify` re-hashes everything, whatever the record says.

    <entry>/.verified   {"<boot id>": {"<file>": [size, mtime_ns, inode], ...}, ...}
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

from pipeline.core import fileio, hashing
from pipeline.store._entry import ENTRY_FILE, regular_file_problem
from pipeline.store._entry import VERIFIED as RECORD

COARSEST_MTIME_NS = 2 * 10**9  # FAT's 2 s; ext4, xfs and NFS are finer
BACKDATE_NS = 10 * 10**9
KEEP_BOOTS = 8  # a store shared by several hosts keeps each host's record


@functools.cache
def boot_id() -> str | None:
    """This boot of this host (Linux); None where unknown: then nothing is trusted."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def stamp(path: Path) -> list[int]:
    st = os.lstat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def backdate(path: Path) -> None:
    """Date a file the store just wrote 10 s back (see the module docstring)."""
    st = os.lstat(path)
    os.utime(path, ns=(st.st_atime_ns, time.time_ns() - BACKDATE_NS), follow_symlinks=False)


class Seen:
    """The record of one entry folder for this boot: read once, saved once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.boot = boot_id()
        self._all: dict[str, dict[str, list[int]]] = {}
        with contextlib.suppress(OSError, ValueError):
            data = json.loads((folder / RECORD).read_text())
            if isinstance(data, dict):
                self._all = {b: f for b, f in data.items() if isinstance(f, dict)}
        self.files = dict(self._all.get(self.boot, {})) if self.boot else {}
        self._changed = False

    def problem(self, name: str, want: dict[str, Any], trust: bool = True) -> str | None:
        """Why the entry's file `name` is not the {bytes, sha256} `want`; None when it is.
        Read and hashed unless `trust` and its stat is the one recorded."""
        path = self.folder / name
        bad = regular_file_problem(self.folder, name)
        if bad is not None:
            return bad
        try:
            before = stamp(path)
            if before[0] != want["bytes"]:
                return f"{name} is {before[0]} bytes, expected {want['bytes']} (truncated?)"
            if trust and self.boot is not None and self.files.get(name) == before:
                return None
            checked_ns = time.time_ns()
            if hashing.sha256_file(path) != want["sha256"]:
                return f"{name} sha256 mismatch"
        except FileNotFoundError:
            return f"{name} missing"
        except OSError as e:
            return f"{name} unreadable ({e.strerror})"
        self.note(name, before, checked_ns)
        return None

    def note(self, name: str, before: list[int], checked_ns: int) -> None:
        """Record `before` (taken before the check that started at `checked_ns`) if the
        file still looks so and is old enough that no write could hide in its tick."""
        if self.boot is None or before[1] >= checked_ns - COARSEST_MTIME_NS:
            return
        with contextlib.suppress(OSError):
            if stamp(self.folder / name) == before and self.files.get(name) != before:
                self.files[name] = before
                self._changed = True

    def save(self) -> None:
        """Best effort: an entry this user cannot write is simply hashed on every hit."""
        if not self._changed or self.boot is None:
            return
        others = [(b, f) for b, f in self._all.items() if b != self.boot][-(KEEP_BOOTS - 1) :]
        with contextlib.suppress(OSError):
            fileio.write_bytes(
                self.folder / RECORD,
                json.dumps({**dict(others), self.boot: self.files}).encode(),
                fsync=False,
            )
        self._changed = False


def vouches(entry: Path, name: str, path: Path, sha256: str) -> bool:
    """Whether `path` is the entry's own file `name` (a hard link to it: an engine served into
    artifacts/), unchanged since the entry recorded it whole with this sha256; then a loader
    need not read it either. Anything else (a copy, another boot, a changed stat): False."""
    try:
        listed = json.loads((entry / ENTRY_FILE).read_text())["files"][name]["sha256"]
        same = os.path.samefile(path, entry / name)
        now = stamp(path)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return same and listed == sha256 and Seen(entry).files.get(name) == now
