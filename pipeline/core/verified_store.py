"""Content-addressed, verified stores: one mechanism under the engine store and the
calibration cache, which differ only in the files each entry must hold.

    <root>/entries/<key>/   engine.plan, manifest.json, ... and entry.json (sha256 of each)
    <root>/locks/<key>.lock  flock: concurrent builders of one key build once
    <root>/tmp/              entries being written; renamed into entries/ whole
    <root>/quarantine/       corrupt entries moved aside, never loaded

An entry appears by one atomic rename after every file is fsynced, so a killed
builder leaves at most a tmp folder, which is cleaned up later. flock locks die
with their process, so a SIGKILLed builder leaves no lock to wait on."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pipeline.core import fileio, hashing
from pipeline.core.errors import PipelineError

ENTRY_FILE = "entry.json"
LAST_USED = ".last_used"
_KEY = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class Entry:
    key: str
    path: Path
    meta: dict

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def files(self) -> list[str]:
        return sorted(self.meta["files"])

    @property
    def size(self) -> int:
        return sum(f["bytes"] for f in self.meta["files"].values())

    @property
    def last_used(self) -> float:
        marker = self.path / LAST_USED
        return marker.stat().st_mtime if marker.exists() else (self.path / ENTRY_FILE).stat().st_mtime


class VerifiedStore:
    def __init__(self, root: str | Path, required: tuple[str, ...] = (), what: str = "store") -> None:
        self.root = Path(root)
        self.entries = self.root / "entries"
        self.required = required
        self.what = what

    # -- reading ---------------------------------------------------------------------
    def problems(self, key: str) -> list[str]:
        """Why the entry for `key` must not be loaded; [] when it is whole."""
        path = self.entries / key
        try:
            meta = json.loads((path / ENTRY_FILE).read_text())
        except FileNotFoundError:
            return [f"{ENTRY_FILE} missing"]
        except (json.JSONDecodeError, UnicodeDecodeError):
            return [f"{ENTRY_FILE} unreadable"]
        out = []
        if meta.get("key") != key:
            out.append(f"{ENTRY_FILE} names key {str(meta.get('key'))[:16]}")
        files = meta.get("files", {})
        for name in self.required:
            if name not in files:
                out.append(f"{name} not listed")
        for name, want in files.items():
            f = path / name
            if not f.is_file():
                out.append(f"{name} missing")
            elif f.stat().st_size != want["bytes"]:
                out.append(f"{name} is {f.stat().st_size} bytes, expected {want['bytes']} (truncated?)")
            elif hashing.sha256_file(f) != want["sha256"]:
                out.append(f"{name} sha256 mismatch")
        return out

    def fetch(self, key: str) -> tuple[Entry | None, list[str]]:
        """(verified entry or None, why it was refused). A corrupt entry is reported
        and moved aside, never returned."""
        path = self.entries / key
        if not path.is_dir():
            return None, []
        bad = self.problems(key)
        if bad:
            moved = self.quarantine(key)
            print(f"warning: {self.what} entry {key[:16]} is corrupt ({'; '.join(bad)}); "
                  f"moved to {moved} and will be recomputed", file=sys.stderr)
            return None, bad
        with contextlib.suppress(OSError):
            (path / LAST_USED).touch()
        return Entry(key, path, json.loads((path / ENTRY_FILE).read_text())), []

    def get(self, key: str) -> Entry | None:
        return self.fetch(key)[0]

    def keys(self) -> list[str]:
        if not self.entries.is_dir():
            return []
        return sorted(p.name for p in self.entries.iterdir() if _KEY.match(p.name))

    def entry_unverified(self, key: str) -> Entry | None:
        try:
            return Entry(key, self.entries / key, json.loads((self.entries / key / ENTRY_FILE).read_text()))
        except (OSError, json.JSONDecodeError):
            return None

    # -- writing ---------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, key: str, timeout: float = -1) -> Iterator[None]:
        from filelock import FileLock, Timeout

        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        owner = locks / f"{key}.owner"
        try:
            with FileLock(str(locks / f"{key}.lock"), timeout=timeout):
                fileio.write_text(owner, f"{os.getpid()}\n")  # who holds it, for people and tests
                try:
                    yield
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        owner.unlink()
        except Timeout:
            who = owner.read_text().strip() if owner.exists() else "unknown"
            raise PipelineError(f"{self.what} key {key[:16]} is locked by another builder (pid {who}; "
                                f"waited {timeout:.0f} s)") from None

    def put(self, key: str, files: dict[str, bytes], labels: dict) -> Entry:
        """Write every file, then entry.json, then publish the folder by one rename.
        Call under `lock(key)`."""
        if not _KEY.match(key):
            raise ValueError(f"not a cache key: {key}")
        self.clean_tmp()
        tmp = self.root / "tmp" / f"{key}.{os.getpid()}.{time.monotonic_ns()}"
        tmp.mkdir(parents=True)
        try:
            meta = {"key": key, "labels": labels, "created": time.time(), "files": {}}
            for name, data in files.items():
                fileio.write_bytes(tmp / name, data)
                meta["files"][name] = {"bytes": len(data), "sha256": hashing.sha256_bytes(data)}
            fileio.write_json(tmp / ENTRY_FILE, meta)
            self.entries.mkdir(parents=True, exist_ok=True)
            final = self.entries / key
            if final.exists():  # only a corrupt leftover can be here under the lock
                self.quarantine(key)
            os.rename(tmp, final)
            fileio.fsync_dir(self.entries)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Entry(key, final, meta)

    def quarantine(self, key: str) -> Path:
        dest = self.root / "quarantine" / f"{key}.{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.entries / key, dest)
        return dest

    def remove(self, key: str) -> None:
        path = self.entries / key
        if not path.is_dir():
            raise PipelineError(f"no {self.what} entry {key}")
        with self.lock(key, timeout=30):
            shutil.rmtree(path)

    def clean_tmp(self) -> list[Path]:
        """Remove tmp folders left by builders that no longer run."""
        removed = []
        tmp_root = self.root / "tmp"
        if not tmp_root.is_dir():
            return removed
        for p in tmp_root.iterdir():
            parts = p.name.split(".")
            pid = int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else None
            if pid is None or not _alive(pid):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
        return removed

    def resolve(self, prefix: str) -> str:
        matches = [k for k in self.keys() if k.startswith(prefix)]
        if len(matches) != 1:
            raise PipelineError(f"key prefix '{prefix}' matches {len(matches)} entries in {self.root}")
        return matches[0]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
