"""An entry of a verified store (pipeline.store._verified), what get_or_make did
with it, and what is checked before anything read from an entry is trusted:
entry.json's schema, and that every file it names is a plain, regular file of the
entry's own folder (no `..`, no absolute path, no link leading elsewhere)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from pipeline.core import fileio

ENTRY_FILE = "entry.json"
LAST_USED = ".last_used"
VERIFIED = ".verified"  # each file's stat when last known whole (pipeline.store._stat)
SHA256 = re.compile(r"^[0-9a-f]{64}$")
# Large entry files (engines): linked from the store when just made, and not flushed
# to disk file by file (every read re-hashes them).
LARGE_BYTES = 1 << 20


@dataclass(frozen=True)
class FileOnDisk:
    """A file's bytes that stay on disk on their way into a store (external weights of
    several GB): copied by the kernel and hashed by streaming, never read into memory."""

    path: Path

    def __len__(self) -> int:
        return self.path.stat().st_size

    def __bytes__(self) -> bytes:
        return self.path.read_bytes()


# A file's bytes on their way into a store: bytes, or a view of the buffer they were made
# in (an engine is TensorRT's own memory, never copied: hashing and writing take any
# buffer), or a file on disk.
FileData: TypeAlias = bytes | memoryview | FileOnDisk


def plain_name_problem(name: object, what: str) -> str | None:
    """Why `name` is not a plain file name that stays inside its folder; None if it is."""
    if not isinstance(name, str) or not name:
        return f"{what} names a file {name!r} that is not a file name"
    if name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        return f"{what} names {name!r}, outside its own folder"
    return None


def regular_file_problem(folder: Path, name: str) -> str | None:
    """Why folder/name is not a regular file of that folder (symlinks point elsewhere)."""
    try:
        st = os.lstat(folder / name)
    except FileNotFoundError:
        return f"{name} missing"
    except OSError as e:
        return f"{name} unreadable ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"{name} is a link, possibly outside its own folder"
    if not stat.S_ISREG(st.st_mode):
        return f"{name} is not a regular file"
    return None


def entry_meta_problems(meta: object, key: str, required: tuple[str, ...]) -> list[str]:
    """entry.json against its schema: {key, labels: {}, created: number,
    files: {plain name: {bytes: int >= 0, sha256: hex}}}."""
    if not isinstance(meta, dict):
        return [
            f"{ENTRY_FILE} is {type(meta).__name__ if meta is not None else 'null'}, not an object"
        ]
    out = []
    if meta.get("key") != key:
        out.append(f"{ENTRY_FILE} names key {str(meta.get('key'))[:16]}")
    if not isinstance(meta.get("labels"), dict):
        out.append(f"{ENTRY_FILE} labels is not an object")
    if isinstance(meta.get("created"), bool) or not isinstance(meta.get("created"), (int, float)):
        out.append(f"{ENTRY_FILE} created is not a number")
    files = meta.get("files")
    if not isinstance(files, dict) or not files:
        return [*out, f"{ENTRY_FILE} files is not a non-empty object"]
    for name, want in files.items():
        bad = plain_name_problem(name, ENTRY_FILE)
        if bad is None and name in (ENTRY_FILE, LAST_USED, VERIFIED):
            bad = f"{ENTRY_FILE} lists {name!r}, a name the store keeps for itself"
        if bad is None and not (
            isinstance(want, dict)
            and type(want.get("bytes")) is int
            and want["bytes"] >= 0
            and isinstance(want.get("sha256"), str)
            and SHA256.match(want["sha256"])
        ):
            bad = f"{ENTRY_FILE} entry for {name} is not {{bytes, sha256}}"
        if bad:
            out.append(bad)
    out += [f"{name} not listed" for name in required if name not in files]
    return out


@dataclass
class Entry:
    key: str
    path: Path
    meta: dict[str, Any]

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def files(self) -> list[str]:
        return sorted(self.meta["files"])

    @property
    def size(self) -> int:
        return sum(f["bytes"] for f in self.meta["files"].values())

    @property
    # Open shape: the labels its maker gave; the engine, job and calibration stores differ.
    def labels(self) -> dict[str, Any]:
        labels: dict[str, Any] = self.meta["labels"]
        return labels

    def place(self, name: str, dest: Path) -> None:
        """The entry's file `name` at `dest`: a large one (the engine) hard-linked, free for a
        multi-GB engine; a small one (the manifest, the logs) copied, an inode of its own, so
        a hand edit in one workspace is neither the store's nor another workspace's."""
        if self.meta["files"][name]["bytes"] >= LARGE_BYTES:
            self.link_to(name, dest)
            return
        dest.unlink(missing_ok=True)  # it may be a link to another entry: never write through
        shutil.copyfile(self.file(name), dest)

    def link_to(self, name: str, dest: Path) -> None:
        """Hard-link the entry's file to `dest` (free for a large engine), copied where a
        link cannot be made (another filesystem, a store file another user may not link).
        A file already at `dest` is unlinked first: writing through it could change the
        bytes of another entry it is linked to. Editing a linked file in place changes
        the stored bytes too; the sha256 check on every read then quarantines that
        entry, never serves it. A file removed meanwhile raises FileNotFoundError."""
        dest.unlink(missing_ok=True)
        try:
            os.link(self.file(name), dest)
        except FileNotFoundError:
            raise
        except OSError:
            shutil.copyfile(self.file(name), dest)

    @property
    def last_used(self) -> float:
        for name in (LAST_USED, ENTRY_FILE):
            with contextlib.suppress(OSError):
                return (self.path / name).stat().st_mtime
        return 0.0


@dataclass
class Outcome:
    """What get_or_make did: served `entry`, or made `made` (then stored as `entry`,
    unless the store refused writes: `not_stored` says why)."""

    event: str
    entry: Entry | None = None
    made: Mapping[str, FileData] | None = None
    damage: list[str] = field(default_factory=list)
    not_stored: str | None = None

    @property
    def hit(self) -> bool:
        return self.made is None

    @property
    def served(self) -> Entry:
        """The entry a hit served (get_or_make gives every hit its entry)."""
        assert self.entry is not None, "an outcome that made nothing has an entry"
        return self.entry

    @property
    def names(self) -> list[str]:
        return sorted(self.made) if self.made is not None else self.served.files

    def read(self, name: str) -> bytes:
        if self.made is None:
            return self.served.file(name).read_bytes()
        data = self.made[name]
        return data if isinstance(data, bytes) else bytes(data)

    def copy_to(self, name: str, dest: Path) -> None:
        """A hit is placed as Entry.place does (large files linked, small ones copied).
        What was just made is linked from the store too when it is large (the engine is
        written once, into the store); small files are written from memory, their own
        inodes, so damage that later befalls the entry's manifest leaves the workspace copy
        adoptable."""
        if self.made is None:
            self.served.place(name, dest)
            return
        if self.entry is not None and len(self.made[name]) >= LARGE_BYTES:
            try:
                self.entry.link_to(name, dest)
                return
            except FileNotFoundError:
                pass  # `cache rm` took the new entry already; its bytes are still here
        data = self.made[name]
        if isinstance(data, FileOnDisk):
            shutil.copyfile(data.path, dest)
        else:
            fileio.write_bytes(dest, data)
