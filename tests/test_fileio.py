import os

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
    with pytest.raises(RuntimeError):
        with fileio.staged_dir(final) as tmp:
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


def test_write_bytes_leaves_no_temp_files(tmp_path):
    fileio.write_bytes(tmp_path / "f.bin", b"abc")
    assert os.listdir(tmp_path) == ["f.bin"]
