"""How much memory a stage used, and whether the machine has what a piece of work needs.

Peak RSS: each stage records the most resident memory it held under PEAK_KEY in a file of
its own, metrics/memory/<stage>.json, which no later stage reads: the figure differs a little
from run to run, and in a file DVC hashes as a dep it would rerun every later stage. A stage
run as its own process (`python -m stages.<name>`, what DVC runs) reports the process's
peak; where one
process runs several stages (a sweep job, run_all), the peak is reset when a later stage
starts, so each stage reports its own. Child processes (graphviz for the report) add the
largest child's peak: an upper bound, since a child need not peak while its parent does.

Sizes: work whose size the user's config decides (a batch, a profile's max shape, a
calibration or reference set, an engine on disk) is compared with what the machine has
before anything is allocated or written, so a typo of a few zeros ends in one line naming
the setting, not a MemoryError traceback or a full disk with half a file on it."""

from __future__ import annotations

import os
import resource
import shutil
import sys
from pathlib import Path
from typing import Final

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.core.numbers import MIB

PEAK_KEY: Final = "peak_rss_mib"
# Room left beside a file of `need` bytes: the filesystem's own blocks, the small files
# written with it, and a little for everyone else on the disk.
DISK_MARGIN_MIN = 16 * MIB
DISK_MARGIN_FRACTION = 0.05

_measured_before = False  # whether an earlier stage in this process took a measurement


def large_blocks_returned(threshold: int = 1 << 16) -> bool:
    """Have glibc map every block of `threshold` bytes or more on its own, so freeing it
    gives it back to the system. By default glibc raises that threshold as large blocks
    are freed, and then serves them from its heap, where a block freed between longer-lived
    ones is kept: a search that widens every weight variant on each run grew from 2.1 to
    3.4 GB that way on a 0.74 GB model. A no-op (False) where libc has no mallopt."""
    m_mmap_threshold = -3  # glibc's malloc.h
    return _glibc("mallopt", m_mmap_threshold, threshold)


def free_heap_returned() -> bool:
    """Give the memory glibc's heaps hold free back to the system (malloc_trim). A session
    freed leaves its blocks free in the heap, not returned: the 135 M decoder's calibrate
    stage opened each judging session on a process of 0.7 to 1.0 GB by where the last one's
    blocks lay. A no-op (False) where libc has no malloc_trim."""
    return _glibc("malloc_trim", 0)


def _glibc(function: str, *args: int) -> bool:
    """glibc's `function` called with `args`, its result as a bool; False where this libc
    has no such function."""
    import ctypes

    try:
        # by its soname, not ctypes.util.find_library: that runs `ldconfig -p` in a child
        # process, whose peak RSS starts at this process's size when it forks, and a
        # stage's peak counts its children's (a 2.46 GB search reported 10.4 GB for 7.4)
        return bool(getattr(ctypes.CDLL("libc.so.6"), function)(*args))
    except (OSError, AttributeError):
        return False


def _maxrss_bytes(who: int) -> int:
    # ru_maxrss is KiB on Linux, bytes on macOS.
    rss = resource.getrusage(who).ru_maxrss
    return int(rss) if sys.platform == "darwin" else int(rss) * 1024


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far (since the last reset_peak).

    Linux's VmHWM, the high-water mark of this process's own memory. Not getrusage's
    ru_maxrss: exec carries the parent's peak into it, so a stage started by a large
    process (pytest, a sweep's launcher) would report at least its parent's size."""
    hwm = _proc_bytes("/proc/self/status", "VmHWM")
    return hwm if hwm is not None else _maxrss_bytes(resource.RUSAGE_SELF)


def children_peak_rss_bytes() -> int:
    """The largest peak RSS of any child process waited for so far."""
    return _maxrss_bytes(resource.RUSAGE_CHILDREN)


def reset_peak() -> bool:
    """Set the process's peak RSS (VmHWM) back to its present RSS (Linux 4.0+,
    /proc/self/clear_refs value 5). False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class StagePeak:
    """Started when a stage starts; mib() is the stage's peak RSS so far."""

    def __init__(self) -> None:
        global _measured_before
        # The first stage of a process keeps the process's whole peak (its imports are part
        # of what running it costs); a later one starts from what it found.
        self.reset = _measured_before and reset_peak()
        _measured_before = True
        self._children_before = children_peak_rss_bytes()

    def bytes(self) -> int:
        children = children_peak_rss_bytes()
        # RUSAGE_CHILDREN cannot be reset: it counts only if a child of this stage raised it.
        return peak_rss_bytes() + (children if children > self._children_before else 0)

    def mib(self) -> float:
        return round(self.bytes() / MIB, 1)


def record(metrics_dir: Path, stage: str, peak: StagePeak) -> float:
    """Write the stage's peak RSS to metrics/memory/<stage>.json (atomically); the value."""
    mib = peak.mib()
    fileio.write_json(
        Path(metrics_dir) / "memory" / f"{stage}.json", {"stage": stage, PEAK_KEY: mib}
    )
    return mib


def row(mib: float) -> tuple[str, str]:
    """The end-of-stage table's row for a stage's peak RSS."""
    return ("peak RSS", f"{mib:,.0f} MiB")


# -- what the machine has ------------------------------------------------------------


def _proc_bytes(path: str, field: str) -> int | None:
    """A `Field:  N kB` line of a /proc file (meminfo, self/status), in bytes."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit at this level


def cgroup_available_bytes(
    root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")
) -> int | None:
    """Limit minus usage of the tightest memory cgroup this process is in (v2 and its
    ancestors, or v1's memory controller); None where no limit applies."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    best: int | None = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":  # v2: limits of every ancestor apply too
            folder = root / rel.lstrip("/")
            levels = [folder, *folder.parents]
            names = ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            levels = [root / "memory" / rel.lstrip("/"), root / "memory"]
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        for level in levels:
            if not level.is_relative_to(root):
                break
            limit, used = _read_int(level / names[0]), _read_int(level / names[1])
            total = _proc_bytes("/proc/meminfo", "MemTotal")
            # v1 writes "no limit" as a huge number
            if limit is not None and used is not None and (total is None or limit < total):
                best = min(best, limit - used) if best is not None else limit - used
    return None if best is None else max(best, 0)


def available_memory() -> tuple[int | None, str]:
    """(bytes this process may still allocate, where that figure comes from); (None, why)
    where the machine does not say."""
    found = [
        (b, src)
        for b, src in (
            (_proc_bytes("/proc/meminfo", "MemAvailable"), "MemAvailable"),
            (cgroup_available_bytes(), "the cgroup's memory limit"),
        )
        if b is not None
    ]
    return min(found) if found else (None, "no /proc/meminfo")


def size(n: int) -> str:
    """'24,576,000,000,000 bytes (22.4 TiB)': the exact count and a readable one."""
    value, unit = float(n), "bytes"
    for u in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024:
            break
        value, unit = value / 1024, u
    return f"{n:,} bytes" if unit == "bytes" else f"{n:,} bytes ({value:.1f} {unit})"


def require_memory(
    need: int, key: str, what: str, available: tuple[int | None, str] | None = None
) -> None:
    """One line naming `key` when `need` bytes (for `what`) exceed what the machine has."""
    have, source = available if available is not None else available_memory()
    if have is not None and need > have:
        raise PipelineError(
            f"{key}: {what} needs {size(need)} of memory; this machine has "
            f"{size(have)} available ({source})"
        )


def require_gpu_memory(need: int, key: str, what: str, free: int | None) -> None:
    """The same for the GPU's free memory (NVML; pipeline.machine.gpu_memory); None: no GPU."""
    if free is not None and need > free:
        raise PipelineError(
            f"{key}: {what} needs {size(need)} of GPU memory; the GPU has {size(free)} free"
        )


def disk_free(path: Path) -> int:
    """Free bytes (for this user) on the filesystem that holds, or will hold, `path`."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def disk_margin(need: int) -> int:
    return max(DISK_MARGIN_MIN, int(need * DISK_MARGIN_FRACTION))


def require_disk(path: Path, need: int, what: str) -> None:
    """One line when the filesystem of `path` lacks room for `need` bytes (plus a margin)."""
    have = disk_free(path)
    if need + disk_margin(need) > have:
        raise PipelineError(
            f"not enough disk for {what} in {path}: it needs {size(need)} plus "
            f"{size(disk_margin(need))} of margin; the filesystem has {size(have)} free"
        )


def require_disk_for_link(need: int, what: str, store: Path, linked: Path) -> None:
    """Room for `need` bytes written into `store` and hard-linked to `linked`, which costs
    a second copy only where the two lie on different filesystems."""
    require_disk(store, need, what)
    if not same_filesystem(store, linked):
        require_disk(linked, need, f"the copy of {what}")


def same_filesystem(a: Path, b: Path) -> bool:
    """Whether `a` and `b` (or their nearest existing parents) lie on one filesystem."""

    def device(p: Path) -> int:
        p = Path(p).absolute()
        while not p.exists() and p != p.parent:
            p = p.parent
        return os.stat(p).st_dev

    return device(a) == device(b)
