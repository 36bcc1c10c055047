"""Graph files past 2 GB are worked on by path: hashed by streaming, loaded without their
weights, written with one external-data file. Small models stand in for large ones by
lowering the inline limit."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from models import large_table
from pipeline.core import fileio
from pipeline.graph import onnx_model


def test_sha256_streams_graph_and_every_data_file(tmp_path):
    path = large_table.write(tmp_path / "m", mib=2, files=3)
    files, digest = onnx_model.files_and_sha256(path)
    assert [f.name for f in files] == ["model.onnx", "table_0.bin", "table_1.bin", "table_2.bin"]
    # the digest it always had: the graph's bytes, then each data file's name and bytes
    h = hashlib.sha256(path.read_bytes())
    for f in files[1:]:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    assert digest == h.hexdigest()
    (tmp_path / "m" / "table_1.bin").write_bytes(b"changed")
    assert onnx_model.sha256(path) != digest


def test_load_without_weights_reads_the_graph_only(tmp_path):
    path = large_table.write(tmp_path / "m", mib=4, files=1)
    graph = onnx_model.load(path, check=False, weights=False)
    assert onnx_model.weight_bytes(graph) < 256 * 1024  # the small projection only
    full = onnx_model.load(path, check=False)
    assert onnx_model.weight_bytes(full) >= 4 << 20


def test_save_puts_weights_past_the_limit_in_one_file(tmp_path, monkeypatch):
    src = large_table.write(tmp_path / "src", mib=2, files=4)
    model = onnx_model.load(src, check=False)
    feeds = {"ids": np.array([[0, 5, 7]], np.int64)}
    want = ort.InferenceSession(str(src)).run(None, feeds)[0]
    monkeypatch.setattr(onnx_model, "INLINE_LIMIT", 1 << 20)
    out = tmp_path / "out" / "model.onnx"
    out.parent.mkdir()
    written = onnx_model.save(model, out)
    assert [p.name for p in written] == ["model.onnx", "model.onnx.data"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert out.stat().st_size < 64 * 1024
    onnx.checker.check_model(str(out))
    np.testing.assert_array_equal(ort.InferenceSession(str(out)).run(None, feeds)[0], want)
    # with the user's umask, as the graph: onnx itself creates the data file owner-only
    modes = {stat.S_IMODE(p.stat().st_mode) for p in written}
    assert modes == {fileio.file_mode()}, [oct(m) for m in modes]
    # written again over itself: the data file is replaced, not appended to
    onnx_model.save(onnx_model.load(out, check=False), out)
    assert (out.parent / "model.onnx.data").stat().st_size < (3 << 20)
    np.testing.assert_array_equal(ort.InferenceSession(str(out)).run(None, feeds)[0], want)
    # below the limit: one file, as before
    small = tmp_path / "small.onnx"
    assert onnx_model.save(onnx_model.load(out, check=False, weights=False), small) == [small]


def test_in_memory_graph_past_the_limit_runs_from_a_file(tmp_path, monkeypatch):
    """A graph whose weights a transform rewrote in memory (SmoothQuant) is handed to ONNX
    Runtime as a file with its weights beside it, and keeps its weights in memory."""
    from pipeline.graph import onnx_runtime

    src = large_table.write(tmp_path / "m", mib=2, files=2)
    feeds = [{"ids": np.array([[3, 4]], np.int64)}]
    want = onnx_runtime.run_batches(src, feeds)
    model = onnx_model.load(src, check=False)
    held = onnx_model.weight_bytes(model)
    monkeypatch.setenv(onnx_model.INLINE_LIMIT_ENV, str(1 << 20))
    with onnx_runtime.model_file(model) as f:
        assert isinstance(f, Path) and (f.parent / "model.onnx.data").is_file()
    np.testing.assert_array_equal(
        onnx_runtime.run_model(model, feeds)[0]["scores"], want[0]["scores"]
    )
    assert onnx_model.weight_bytes(model) == held


def test_inline_weights_past_the_limit_leave_export_in_a_data_file(tmp_path, monkeypatch):
    """A user's file (or a torch export below 2 GB) with its weights inline: the export
    writes them to one data file beside the graph, and the outputs stay the same."""
    from pipeline.export import export
    from pipeline.graph import onnx_import

    ext = large_table.write(tmp_path / "ext", mib=2, files=2)
    inline = tmp_path / "user" / "model.onnx"
    inline.parent.mkdir()
    inline.write_bytes(onnx_model.load(ext, check=False).SerializeToString())
    feeds = {"ids": np.array([[9, 1]], np.int64)}
    want = ort.InferenceSession(str(inline)).run(None, feeds)[0]
    monkeypatch.setenv(onnx_model.INLINE_LIMIT_ENV, str(1 << 20))
    dest = tmp_path / "export" / "model.onnx"
    dest.parent.mkdir()
    onnx_import.import_onnx(inline, dest)
    export.infer_shapes(dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert dest.stat().st_size < 256 * 1024
    np.testing.assert_array_equal(ort.InferenceSession(str(dest)).run(None, feeds)[0], want)
