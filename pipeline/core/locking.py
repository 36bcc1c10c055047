"""One exclusive file lock (flock) that leaves no lock file behind.

The holder writes its pid into the lock file (for people, and for tests that kill
it) and unlinks the file before it lets go. A waiter that then gets the lock on the
unlinked file sees that the path no longer names the file it locked and tries again,
so unlinking never lets two processes hold one lock. flock dies with its process:
a SIGKILLed holder leaves a file that the next holder reuses and removes.

Written here rather than taken from `filelock`: filelock leaves its lock files behind
on Unix (removing them safely needs the same-file check above), and a shared store
must not fill with them; it also opens a lock file for writing, so it cannot lock one
that another member of the group created without group write."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path


class LockTimeout(Exception):
    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is held by pid {holder}")
        self.holder = holder


def holder(path: str | os.PathLike[str], tries: int = 20) -> str:
    # A holder writes its pid just after flock succeeds; a waiter that reads in between
    # sees an empty file, so it looks again for a moment before saying "unknown".
    for _ in range(tries):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            return "unknown"
        if text:
            return text
        time.sleep(0.01)
    return "unknown"


def _open(path: Path) -> tuple[int, bool]:
    """(fd, writable). A lock file another member of the group made is locked
    read-only when it is not writable to us: flock needs no write access."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666), True
    except PermissionError:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC), False


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def acquire(path: str | os.PathLike[str], timeout: float = -1, poll: float = 0.05) -> int:
    """Lock `path` exclusively and return the fd to give to release(); timeout < 0
    waits for ever, else LockTimeout. Folder errors (read-only, not a folder) are
    the caller's OSError."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout if timeout >= 0 else None
    retried = False
    while True:
        fd, writable = _open(path)
        try:
            if deadline is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
                got = True
            else:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    got = True
                except BlockingIOError:
                    got = False
            if got and _same_file(fd, path):
                if writable:
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # busy, or locked a file its holder had just removed
        if not got:
            assert deadline is not None  # only a non-blocking try (with a deadline) fails
            if time.monotonic() >= deadline:
                who = holder(path)
                if who == "unknown" and not retried:
                    retried = True  # it let go while we looked: one more try
                    continue
                raise LockTimeout(path, who)
            time.sleep(poll)


def release(path: str | os.PathLike[str], fd: int) -> None:
    """Remove the lock file, then let go: a waiter on the removed file starts again.
    A lock file we may not remove (another user's, in a folder we cannot write)
    stays for the next holder; that is harmless."""
    try:
        with contextlib.suppress(OSError):
            os.unlink(path)
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive(path: str | os.PathLike[str], timeout: float = -1) -> Iterator[None]:
    fd = acquire(path, timeout)
    try:
        yield
    finally:
        release(path, fd)


def remove_if_free(path: str | os.PathLike[str]) -> bool:
    """Remove a lock file nobody holds (one a killed holder left); True if removed."""
    path = Path(path)
    try:
        fd, _ = _open(path)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        if not _same_file(fd, path):
            return False
        os.unlink(path)
        return True
    finally:
        os.close(fd)


def held(path: str | os.PathLike[str]) -> bool:
    """Whether some process holds the lock on `path` now."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def host() -> str:
    """This host's name, safe inside a file name (a store may be shared by hosts)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"


def alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
