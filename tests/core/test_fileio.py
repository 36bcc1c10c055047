import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from pipeline.core import fileio
from pipeline.core.errors import PipelineError


def test_npz_is_byte_deterministic_and_roundtrips(tmp_path):
    arrays = {"a": np.arange(6).reshape(2, 3), "b": np.ones(3, np.float16)}
    assert fileio.npz_bytes(arrays) == fileio.npz_bytes(dict(reversed(list(arrays.items()))))
    fileio.write_npz(tmp_path / "x.npz", arrays)
    back = fileio.read_npz(tmp_path / "x.npz")
    assert set(back) == {"a", "b"} and (back["a"] == arrays["a"]).all()


def test_read_npz_refuses_pickles(tmp_path):
    np.save(tmp_path / "evil.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    import zipfile

    with zipfile.ZipFile(tmp_path / "evil.npz", "w") as z:
        z.write(tmp_path / "evil.npy", "evil.npy")
    with pytest.raises(PipelineError, match="unreadable"):
        fileio.read_npz(tmp_path / "evil.npz")


def test_staged_dir_leaves_old_output_on_failure(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "keep.txt").write_text("old")
    with pytest.raises(RuntimeError), fileio.staged_dir(final) as tmp:
        (tmp / "half.txt").write_text("new")
        raise RuntimeError("killed")
    assert os.listdir(final) == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"], "no scratch folders left behind"


def test_staged_dir_replaces_whole(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "stale.txt").write_text("old")
    with fileio.staged_dir(final) as tmp:
        (tmp / "fresh.txt").write_text("new")
    assert os.listdir(final) == ["fresh.txt"]


def _writer_killed_in(final, *, wait: bool):
    """A process that stages `final` and is SIGKILLed inside (wait=False), or that sits
    inside until killed (wait=True): the scratch folder of a dead writer or a live one."""
    code = (
        "import os, signal, sys, time\n"
        "from pipeline.core import fileio\n"
        "with fileio.staged_dir(sys.argv[1]) as tmp:\n"
        "    (tmp / 'half.onnx').write_bytes(b'x' * 1000)\n"
        "    print('inside', flush=True)\n"
        "    time.sleep(60) if sys.argv[2] == '1' else os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(final), "1" if wait else "0"], stdout=subprocess.PIPE
    )
    assert p.stdout is not None and p.stdout.readline() == b"inside\n"
    if not wait:
        assert p.wait() == -signal.SIGKILL
    return p


def test_staged_dir_removes_what_a_killed_writer_left_and_keeps_a_live_ones(tmp_path):
    final = tmp_path / "calibrate"
    _writer_killed_in(final, wait=False)
    dead = [p.name for p in tmp_path.iterdir()]
    assert len(dead) == 1 and dead[0].startswith(".calibrate.") and dead[0].endswith(".tmp")
    live = _writer_killed_in(final, wait=True)
    try:
        with fileio.staged_dir(final) as tmp:
            (tmp / "model.onnx").write_text("new")
        left = sorted(p.name for p in tmp_path.iterdir())
        assert dead[0] not in left, "the killed writer's scratch is removed"
        assert len(left) == 2 and f"-{live.pid}." in left[0], left  # the live writer's stays
    finally:
        live.kill()
        live.wait()
    assert os.listdir(final) == ["model.onnx"]


def test_write_bytes_leaves_no_temp_files(tmp_path):
    fileio.write_bytes(tmp_path / "f.bin", b"abc")
    assert os.listdir(tmp_path) == ["f.bin"]


@pytest.fixture
def umask():
    """Set the process umask for one test, then put it back."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize(
    "mask,file_mode,dir_mode", [(0o002, 0o664, 0o775), (0o022, 0o644, 0o755), (0o077, 0o600, 0o700)]
)
def test_writes_follow_the_umask(tmp_path, umask, mask, file_mode, dir_mode):
    import stat

    umask(mask)
    assert fileio.umask() == mask
    fileio.write_bytes(tmp_path / "f.bin", b"abc")
    assert stat.S_IMODE((tmp_path / "f.bin").stat().st_mode) == file_mode
    with fileio.staged_dir(tmp_path / "out") as tmp:
        fileio.write_text(tmp / "report.html", "<html/>")
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == dir_mode
    assert stat.S_IMODE((tmp_path / "out" / "report.html").stat().st_mode) == file_mode


@pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to give a folder a group this process is not in"
)
def test_a_setgid_folder_gives_its_group_to_new_files_and_folders(tmp_path, umask):
    import stat

    umask(0o002)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, -1, 12345)
    os.chmod(shared, 0o2775)
    fileio.write_bytes(shared / "a" / "f.bin", b"abc")
    with fileio.staged_dir(shared / "out") as tmp:
        fileio.write_text(tmp / "x.txt", "x")
    for p in (shared / "a", shared / "a" / "f.bin", shared / "out", shared / "out" / "x.txt"):
        assert p.stat().st_gid == 12345, p
    assert (
        stat.S_IMODE((shared / "out").stat().st_mode) == 0o2775
    )  # setgid kept on the staged folder


def test_lock_excludes_other_processes_and_leaves_no_file(tmp_path):
    """Four processes add 1 to a counter 40 times each under the lock, which is
    removed after every release: no increment is lost, no lock file remains."""
    import subprocess
    import sys

    from tests.conftest import REPO

    counter = tmp_path / "n"
    counter.write_text("0")
    code = (
        "import sys\nfrom pathlib import Path\nfrom pipeline.core import locking\n"
        "for _ in range(40):\n    with locking.exclusive(sys.argv[1] + '.lock'):\n"
        "        p = Path(sys.argv[1]); p.write_text(str(int(p.read_text()) + 1))\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(counter)], cwd=REPO) for _ in range(4)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0] * 4
    assert counter.read_text() == "160"
    assert sorted(os.listdir(tmp_path)) == ["n"]
