"""Content-addressed, verified stores: one mechanism under the engine store and the
calibration cache, which differ only in the files each entry must hold.

    <root>/entries/<key>/   engine.plan, manifest.json, ... and entry.json (sha256 of each)
    <root>/locks/<key>.lock  flock while a key is written or repaired; removed on release
    <root>/tmp/              entries being written; renamed into entries/ whole
    <root>/quarantine/       damaged entries moved aside, never loaded

An entry appears by one atomic rename after every file is fsynced, so a killed
builder leaves at most a tmp folder, which is cleaned up later. flock locks die
with their process, so a SIGKILLed builder leaves no lock to wait on.

Nothing read from an entry is trusted before it is checked: entry.json must have
the schema below, name only plain files inside its own folder, and every file must
have the listed size and sha256; anything else is damage. Damage is only moved aside
under the key's lock (checked again there), so builders that meet one damaged entry
at once never trip over each other."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.core import console, fileio, locking
from pipeline.core.errors import PipelineError
from pipeline.store import _files, _stat
from pipeline.store._entry import (
    ENTRY_FILE,
    LAST_USED,
    SHA256,
    Entry,
    FileData,
    Outcome,
    entry_meta_problems,
    plain_name_problem,
)

_KEY = SHA256
# A store that cannot be written (read-only mount, no permission): hits still work.
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)
# Another host's unfinished write is only taken for debris after this long.
FOREIGN_TMP_S = 24 * 3600


class StoreNotWritable(PipelineError):
    """The store can be read but not written; the caller may go on without it."""


class VerifiedStore:
    def __init__(
        self, root: str | Path, required: tuple[str, ...] = (), what: str = "store"
    ) -> None:
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise PipelineError(
                f"{what} {self.root} is not a folder (a file is in the way); "
                f"point the store elsewhere or remove the file"
            )
        self.entries = self.root / "entries"
        self.locks = self.root / "locks"
        self.required = required
        self.what = what
        self._held: set[str] = set()

    # -- reading ---------------------------------------------------------------------
    def _read_meta(self, key: str) -> tuple[dict[str, Any] | None, list[str]]:
        path = self.entries / key / ENTRY_FILE
        try:
            meta = json.loads(path.read_text())
        except FileNotFoundError:
            return None, [f"{ENTRY_FILE} missing"]
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None, [f"{ENTRY_FILE} unreadable"]
        except OSError as e:
            return None, [f"{ENTRY_FILE} unreadable ({e.strerror})"]
        bad = entry_meta_problems(meta, key, self.required)
        return (None, bad) if bad else (meta, [])

    def known_sha256(self, files: Mapping[str, FileData]) -> dict[str, str]:
        """Digests a put can take from its other files (the engine store: the manifest,
        made from the very buffer being put, or checked against the file being adopted),
        so a large file is hashed once. The put records the file as known whole on the
        strength of it (pipeline.store._stat), so it must come from those bytes."""
        return {}

    def content_problems(self, path: Path, meta: dict[str, Any]) -> list[str]:
        """Checks a kind of store adds on its files' contents (the engine store: the
        manifest's schema); files are already known whole."""
        return []

    def problems(self, key: str, trust_stat: bool = False) -> list[str]:
        """Why the entry for `key` must not be loaded; [] when it is whole. Every file is
        hashed, except with `trust_stat` one whose stat is the one recorded when it was
        last known whole (pipeline.store._stat): a hit on a large entry."""
        path = self.entries / key
        meta, out = self._read_meta(key)
        if meta is None:
            return out
        seen = _stat.Seen(path)
        out = [
            bad
            for name, want in meta["files"].items()
            if (bad := seen.problem(name, want, trust_stat)) is not None
        ]
        if out:
            return out
        seen.save()
        return self.content_problems(path, meta)

    def fetch(self, key: str) -> tuple[Entry | None, list[str]]:
        """(verified entry or None, why it was refused). A damaged entry is never
        returned; under the key's lock it is also reported and moved aside."""
        path = self.entries / key
        if not path.is_dir():
            return None, []
        bad = self.problems(key, trust_stat=True)
        if bad:
            if key in self._held:
                moved = self.quarantine(key)
                console.warn(
                    f"{self.what} entry {key[:16]} is damaged ({'; '.join(bad)}); "
                    f"moved to {moved} and will be recomputed"
                )
            return None, bad
        meta, bad = self._read_meta(key)
        if meta is None:  # replaced between the check and now
            return None, bad
        with contextlib.suppress(OSError):
            (path / LAST_USED).touch()
        return Entry(key, path, meta), []

    def get(self, key: str) -> Entry | None:
        return self.fetch(key)[0]

    def keys(self) -> list[str]:
        if not self.entries.is_dir():
            return []
        return sorted(p.name for p in self.entries.iterdir() if _KEY.match(p.name))

    def entry_unverified(self, key: str) -> tuple[Entry | None, list[str]]:
        """The entry with a well-formed entry.json, files not re-hashed (for listing)."""
        meta, bad = self._read_meta(key)
        return (Entry(key, self.entries / key, meta) if meta is not None else None), bad

    def get_or_make(
        self,
        key: str,
        make: Callable[[], tuple[Mapping[str, FileData], dict[str, Any], str]],
        usable: Callable[[Entry], bool] = lambda entry: True,
    ) -> Outcome:
        """Serve a whole entry without a lock; else, under the key's lock, look again (made
        meanwhile? damage is moved aside there), else put what `make()` gives (files, labels,
        event). An intact entry that is not `usable` (it names something gone) is made again.
        A read-only store still serves hits; a miss is then made and returned unstored, saying why."""
        entry, damage = self.fetch(key)
        if entry is not None and usable(entry):
            return Outcome("hit", entry)
        made: tuple[Mapping[str, FileData], dict[str, Any], str] | None = None
        making = False
        try:
            with self.lock(key):
                entry, damage_now = self.fetch(key)
                if entry is not None and usable(entry):
                    return Outcome("hit (built meanwhile by another process)", entry, damage=damage)
                if entry is not None:
                    self.remove(key)
                making = True
                made = make()
                files, labels, event = made
                return Outcome(event, self.put(key, files, labels), files, damage_now or damage)
        except StoreNotWritable as e:
            if making and made is None:  # raised inside make(), not by this store
                raise
            files, _, event = made if made is not None else make()
            return Outcome(event, None, files, damage, not_stored=str(e))

    # -- writing ---------------------------------------------------------------------
    def _oserror(self, e: OSError, path: Path, doing: str) -> PipelineError:
        cause = e.strerror or type(e).__name__
        where = Path(e.filename) if e.filename else path
        if e.errno in READ_ONLY_ERRNOS:
            return StoreNotWritable(f"{self.what} {self.root} is not writable ({cause}: {where})")
        return PipelineError(f"{self.what}: cannot {doing} {where}: {cause}")

    @contextlib.contextmanager
    def lock(self, key: str, timeout: float = -1) -> Iterator[None]:
        """The key's lock; taking it again inside is a no-op (a repair under a build)."""
        if key in self._held:
            yield
            return
        path = self.locks / f"{key}.lock"
        try:
            fd = locking.acquire(path, timeout)
        except locking.LockTimeout as e:
            raise PipelineError(
                f"{self.what} key {key[:16]} is locked by another builder (pid {e.holder}; "
                f"waited {timeout:.0f} s)"
            ) from None
        except OSError as e:
            raise self._oserror(e, path, "lock") from None
        self._held.add(key)
        try:
            yield
        finally:
            self._held.discard(key)
            locking.release(path, fd)

    def put(self, key: str, files: Mapping[str, FileData], labels: dict[str, Any]) -> Entry:
        """Write every file, then entry.json, then publish the folder by one rename.
        Call under `lock(key)`."""
        if not _KEY.match(key):
            raise ValueError(f"not a cache key: {key}")
        for name in files:
            if (bad := plain_name_problem(name, "an entry")) is not None:
                raise ValueError(bad)
        self.clean_tmp()
        tmp = self.root / "tmp" / f"{key}.{os.getpid()}.{time.monotonic_ns()}.{locking.host()}"
        try:
            tmp.mkdir(parents=True)
            meta: dict[str, Any] = {
                "key": key,
                "labels": labels,
                "created": time.time(),
                "files": {},
            }
            # In order: a PendingFiles makes its later files while the first are written.
            digests = {name: _files.write(data, tmp / name) for name, data in files.items()}
            known = self.known_sha256(files)  # only after the writes, for the same reason
            seen = _stat.Seen(tmp)
            for name, data in files.items():
                meta["files"][name] = {
                    "bytes": (tmp / name).stat().st_size,
                    "sha256": digests[name] or known.get(name) or _files.sha256(data),
                }
                # Written from the bytes just hashed: known whole without a read (see there).
                _stat.backdate(tmp / name)
                seen.note(name, _stat.stamp(tmp / name), time.time_ns())
            seen.save()
            fileio.write_json(tmp / ENTRY_FILE, meta)
            self.entries.mkdir(parents=True, exist_ok=True)
            final = self.entries / key
            if final.exists():  # only a damaged leftover can be here under the lock
                self.quarantine(key)
            os.rename(tmp, final)
            fileio.fsync_dir(self.entries)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise self._oserror(e, tmp, "write") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Entry(key, final, meta)

    def quarantine(self, key: str) -> Path:
        """Move the entry aside, under the key's lock."""
        with self.lock(key):
            dest = (
                self.root
                / "quarantine"
                / f"{key}.{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}.{time.monotonic_ns()}"
            )
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.rename(self.entries / key, dest)
            except OSError as e:
                raise self._oserror(e, self.entries / key, "move aside") from None
            return dest

    def repair(self, key: str) -> tuple[list[str], Path | None]:
        """Under the key's lock: (problems, where the entry went) if it is still
        damaged there, else ([], None)."""
        with self.lock(key, timeout=60):
            if not (self.entries / key).is_dir():
                return [], None
            bad = self.problems(key)
            return (bad, self.quarantine(key)) if bad else ([], None)

    def remove(self, key: str) -> None:
        path = self.entries / key
        if not path.is_dir():
            raise PipelineError(f"no {self.what} entry {key}")
        with self.lock(key, timeout=30):
            try:
                shutil.rmtree(path)
            except OSError as e:
                raise self._oserror(e, path, "remove") from None

    def clean_tmp(self) -> list[Path]:
        """Remove tmp folders left by builders that no longer run: on this host, by
        pid; a store shared by several hosts keeps another host's for a day."""
        tmp_root, removed = self.root / "tmp", []
        for p in tmp_root.iterdir() if tmp_root.is_dir() else ():
            parts = p.name.split(".")  # key.pid.ns.host
            pid = int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else None
            if len(parts) >= 4 and parts[3] != locking.host():
                with contextlib.suppress(OSError):
                    gone = time.time() - p.stat().st_mtime > FOREIGN_TMP_S
                    if not gone:
                        continue
            elif pid is not None and locking.alive(pid):
                continue
            shutil.rmtree(p, ignore_errors=True)
            if not p.exists():
                removed.append(p)
        return removed

    def stale_locks(self) -> list[Path]:
        """Lock files nobody holds (a killed holder's, or an older version's)."""
        if not self.locks.is_dir():
            return []
        return sorted(p for p in self.locks.iterdir() if p.suffix != ".lock" or not locking.held(p))

    def clean_locks(self) -> list[Path]:
        removed = []
        for p in self.stale_locks():
            if p.suffix != ".lock":  # an older version's owner file
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                removed.append(p)
            elif locking.remove_if_free(p):
                removed.append(p)
        return removed

    def resolve(self, prefix: str) -> str:
        matches = [k for k in self.keys() if k.startswith(prefix)]
        if len(matches) != 1:
            raise PipelineError(
                f"key prefix '{prefix}' matches {len(matches)} entries in {self.root}"
            )
        return matches[0]
