"""pipeline.core.memory on this machine: real peaks, real /proc readings, the real disk."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import namedtuple

import numpy as np
import pytest

from pipeline.core import memory
from pipeline.core.errors import PipelineError

MIB = 1 << 20


def _touch(n_bytes: int) -> np.ndarray:
    a = np.ones(n_bytes, dtype=np.uint8)  # ones() writes every page: resident
    return a


def test_a_later_stage_in_one_process_reports_its_own_peak(monkeypatch):
    if not memory.reset_peak():
        pytest.skip("this kernel does not let a process reset its peak RSS (/proc/self/clear_refs)")
    monkeypatch.setattr(memory, "_measured_before", True)  # as after an earlier stage
    first = memory.StagePeak()
    a = _touch(300 * MIB)
    during = first.mib()
    del a
    second = memory.StagePeak()
    after = second.mib()
    assert during >= 300
    assert after < during - 250, (during, after)
    assert second.reset


def test_the_first_stage_of_a_process_keeps_the_whole_peak():
    """A stage run as its own process: what came before its start (imports) counts."""
    script = (
        "import numpy as np\n"
        "from pipeline.core import memory\n"
        "a = np.ones(200 << 20, dtype=np.uint8); del a\n"
        "p = memory.StagePeak()\n"
        "print(p.mib(), p.reset)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert float(out[0]) >= 200 and out[1] == "False"


def test_a_child_process_peak_counts():
    script = (
        "import subprocess, sys\n"
        "from pipeline.core import memory\n"
        "p = memory.StagePeak()\n"
        "own = memory.peak_rss_bytes()\n"
        "subprocess.run([sys.executable, '-c', "
        "'import numpy as np; a = np.ones(300 << 20, dtype=np.uint8)'], check=True)\n"
        "print(own, p.bytes())\n"
    )
    own, total = map(
        int,
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout.split(),
    )
    assert total - own >= 300 * MIB


def test_a_stage_started_by_a_large_process_reports_its_own_peak_not_its_parents():
    # exec carries the parent's peak into getrusage's ru_maxrss; a stage run by pytest or a
    # sweep's launcher must not report its parent's size
    big = _touch(600 * MIB)
    child = subprocess.run(
        [sys.executable, "-c", "from pipeline.core import memory; print(memory.peak_rss_bytes())"],
        capture_output=True,
        text=True,
        check=True,
    )
    del big
    assert int(child.stdout) < 300 * MIB, int(child.stdout) / MIB


def test_record_writes_the_stage_peak_to_a_file_of_its_own(tmp_path):
    peak = memory.StagePeak()
    value = memory.record(tmp_path, "export", peak)
    data = json.loads((tmp_path / "memory" / "export.json").read_text())
    assert data == {"stage": "export", "peak_rss_mib": value}
    assert value == pytest.approx(memory.peak_rss_bytes() / MIB, rel=0.5) and value > 10
    assert memory.row(1234.4) == ("peak RSS", "1,234 MiB")


def test_available_memory_is_what_proc_says():
    have, source = memory.available_memory()
    total = int(re.search(r"MemTotal:\s+(\d+)", open("/proc/meminfo").read()).group(1)) * 1024
    assert have is not None and 0 < have <= total
    assert source in ("MemAvailable", "the cgroup's memory limit")


def _cgroup(tmp_path, membership: str, files: dict[str, str]):
    root = tmp_path / "cg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc = tmp_path / "cgroup"
    proc.write_text(membership)
    return memory.cgroup_available_bytes(root, proc)


def test_cgroup_v2_limit_of_the_tightest_level(tmp_path):
    got = _cgroup(
        tmp_path,
        "0::/job/step\n",
        {
            "job/step/memory.max": "max\n",
            "job/step/memory.current": str(100 * MIB),
            "job/memory.max": str(1024 * MIB),
            "job/memory.current": str(256 * MIB),
        },
    )
    assert got == 768 * MIB


def test_cgroup_without_a_limit_says_none(tmp_path):
    assert _cgroup(tmp_path, "0::/a\n", {"a/memory.max": "max", "a/memory.current": "5"}) is None
    # v1 writes "no limit" as a number larger than the machine
    v1 = {
        "memory/a/memory.limit_in_bytes": str(2**63 - 4096),
        "memory/a/memory.usage_in_bytes": "7",
    }
    assert _cgroup(tmp_path, "5:memory:/a\n", v1) is None


def test_require_memory_names_key_and_both_byte_counts():
    with pytest.raises(PipelineError) as e:
        memory.require_memory(3 * 2**40, "model.sample_dims.batch=9", "the inputs", (2**30, "X"))
    text = str(e.value)
    assert "model.sample_dims.batch=9" in text and "\n" not in text
    assert "3,298,534,883,328 bytes (3.0 TiB)" in text and "1,073,741,824 bytes (1.0 GiB)" in text
    memory.require_memory(2**30, "k", "w", (2**30, "X"))  # exactly enough: no error
    memory.require_memory(2**60, "k", "w", (None, "unknown"))  # the machine does not say


def test_require_gpu_memory():
    memory.require_gpu_memory(10, "k", "w", None)  # no GPU: nothing to check
    with pytest.raises(PipelineError, match=r"k=1: w needs 11 bytes .* GPU memory.* 10 bytes"):
        memory.require_gpu_memory(11, "k=1", "w", 10)


def test_require_disk_on_the_real_filesystem(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    memory.require_disk(tmp_path / "not" / "yet", 1 << 20, "a small file")
    with pytest.raises(PipelineError) as e:
        memory.require_disk(tmp_path / "not" / "yet", free, "the engine")
    assert "not enough disk for the engine" in str(e.value) and f"{free:,} bytes" in str(e.value)


def test_require_disk_keeps_a_margin(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(100 * MIB, 90 * MIB, 10 * MIB))
    with pytest.raises(PipelineError, match="16,777,216 bytes .16.0 MiB. of margin"):
        memory.require_disk(tmp_path, 1 * MIB, "the engine")


def test_same_filesystem(tmp_path):
    assert memory.same_filesystem(tmp_path, tmp_path / "a" / "b")
    assert memory.size(1) == "1 bytes"
    assert memory.size(1536) == "1,536 bytes (1.5 KiB)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_returning_large_blocks_starts_no_child(monkeypatch):
    """A child forked by a large process reports that process's size as its own peak, and a
    stage's peak counts its children's: finding libc must not run `ldconfig -p`."""

    def no_child(*args, **kwargs):
        raise AssertionError(f"a child process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    assert memory.large_blocks_returned()


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_memory_freed_inside_the_heap_goes_back_to_the_system():
    """Blocks freed below one still held stay in glibc's heap, counted in the process's RSS,
    until malloc_trim hands their pages back (what each accuracy session now opens on)."""
    import numpy as np

    memory.large_blocks_returned(1 << 20)  # 64 KiB blocks from the heap, not mmap
    blocks = [np.ones(64 << 10, dtype=np.uint8) for _ in range(3000)]  # 192 MiB
    last = blocks.pop()  # held: the heap's top stays in use, so free cannot shrink it
    del blocks
    held = _rss_bytes()
    assert memory.free_heap_returned()
    assert held - _rss_bytes() > 100 * MIB
    del last
