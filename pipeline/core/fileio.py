"""Atomic, deterministic writes: a reader never sees half a file, and DVC sees
the same bytes for the same content (no timestamps inside archives).

Files and folders follow the umask like any other tool's: `tempfile` makes 0600
files and 0700 folders, so each is set to what a plain open()/mkdir() would give
(a setgid folder's group then carries over by itself), and a group-writable store
or a served report works for everyone the umask lets in."""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core import locking
from pipeline.core.errors import PipelineError

if TYPE_CHECKING:  # imported where arrays are read or written: most writes need no numpy
    import numpy as np

_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def umask() -> int:
    """The process umask, read without changing it where Linux allows."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~umask()


def dir_mode() -> int:
    return 0o777 & ~umask()


def mkdtemp(prefix: str, dir: str | os.PathLike[str], suffix: str = ".tmp") -> Path:
    """tempfile.mkdtemp, with the mode a plain mkdir would give (setgid kept)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=dir))
    os.chmod(path, dir_mode() | (path.stat().st_mode & stat.S_ISGID))
    return path


def write_bytes(path: str | os.PathLike[str], data: bytes | memoryview, fsync: bool = True) -> Path:
    """Write to a temp file in the same folder, fsync, rename over the target.
    `fsync=False` only where every reader verifies the bytes (a verified store's
    entries): a power cut then costs a rebuild, never a wrong file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), file_mode())
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:  # a failed write names no file: name it
            raise type(e)(e.errno, e.strerror, str(path)) from e
        raise
    fsync_dir(path.parent)
    return path


def write_bytes_if_changed(path: str | os.PathLike[str], data: bytes) -> bool:
    """write_bytes unless the path is a plain file holding exactly these bytes; True if
    it wrote. A file remade on every run (the always-run fingerprint) then keeps its
    inode and mtime, and DVC has no changed output to re-hash and record."""
    path = Path(path)
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_size == len(data) and path.read_bytes() == data:
            return False
    except OSError:
        pass  # missing or unreadable: write it
    write_bytes(path, data)
    return True


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    return write_bytes(path, text.encode())


def to_json(obj: Any, compact: bool = False) -> str:
    """Indented for people; `compact` for large machine-read files (json's C encoder
    only serves dumps without an indent, several times faster)."""
    if compact:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default) + "\n"
    return json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    return write_text(path, to_json(obj))


def read_json(path: str | os.PathLike[str], what: str = "file") -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise PipelineError(f"{what} not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PipelineError(f"{what} is not valid JSON: {path} ({e})") from None


def npz_bytes(arrays: Mapping[str, Any]) -> bytes:
    """An .npz readable by np.load, with fixed member timestamps so equal arrays
    give equal bytes."""
    import numpy as np

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(arrays):
            member = io.BytesIO()
            # asarray, not ascontiguousarray: that makes a rank-0 array (a sample rate) rank 1
            np.lib.format.write_array(
                member, np.asarray(arrays[name], order="C"), allow_pickle=False
            )
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, member.getvalue())
    return buf.getvalue()


def write_npz(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> Path:
    return write_bytes(path, npz_bytes(arrays))


def read_npz(path: str | os.PathLike[str], what: str = "array file") -> dict[str, np.ndarray]:
    """Never unpickles: object arrays in the file are an error, not code to run."""
    import numpy as np

    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise PipelineError(f"{what} not found: {path}") from None
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise PipelineError(f"{what} is unreadable: {path} ({e})") from None


@contextlib.contextmanager
def staged_dir(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a scratch folder beside `final`; on success it replaces `final` whole,
    on any failure it is removed and `final` is left as it was. A writer killed outright
    (SIGKILL, the OOM killer) cannot remove its scratch: the next writer of `final`
    removes what such writers of this host left (_remove_abandoned)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(final)
    tmp = mkdtemp(prefix=f".{final.name}.{_writer()}.", dir=final.parent)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.{_writer()}.old")
        os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _writer() -> str:
    """This process as a scratch folder names it: host and pid (a store or an output folder
    may be shared by machines, whose pids say nothing about each other)."""
    return f"{locking.host()}-{os.getpid()}"


def _remove_abandoned(final: Path) -> None:
    """Scratch and replaced folders of `final` whose writer, on this host, is gone, as the
    engine store cleans its tmp folders. A killed calibrate of a large decoder leaves
    gigabytes there; a live writer's (another stage, another user's job) is kept."""
    host = locking.host()
    for leftover in final.parent.glob(f".{glob.escape(final.name)}.{glob.escape(host)}-*"):
        pid = leftover.name[len(f".{final.name}.{host}-") :].split(".", 1)[0]
        if pid.isdigit() and not locking.alive(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)
