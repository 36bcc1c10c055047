"""write_gathered: a graph whose weights are partly in memory, partly in another graph's
data files, written with one data file of its own; a location that leaves the source's
folder, or data cut short, refused in one line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_model, onnx_runtime
from pipeline.graph.external_data import write_gathered


def _matmuls(tmp_path):
    """y = (x @ a) @ b with `a` saved in an external-data file and `b` in memory."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 8)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "a"], ["h"]),
            helper.make_node("MatMul", ["h", "b"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(a, "a")],
    )
    src = tmp_path / "src" / "model.onnx"
    src.parent.mkdir()
    onnx.save_model(
        helper.make_model(graph), str(src), save_as_external_data=True, location="w.bin"
    )
    model = onnx_model.load(src, check=False, weights=False)
    model.graph.initializer.append(numpy_helper.from_array(b, "b"))
    x = rng.standard_normal((1, 64)).astype(np.float32)
    return model, src.parent, x, x @ a @ b


def test_gathered_graph_runs_from_its_own_folder(tmp_path):
    model, base, x, expected = _matmuls(tmp_path)
    out = tmp_path / "out" / "model.onnx"
    out.parent.mkdir()
    files = write_gathered(model, base, out)
    assert [f.name for f in files] == ["model.onnx", "model.onnx.data"]
    assert onnx_model.external_data_files(
        onnx_model.load(out, check=False, weights=False), out.parent
    ) == [files[1]]
    (base / "w.bin").unlink()  # nothing reads the source's files any more
    got = onnx_runtime.run_batches(out, [{"x": x}])[0]["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("damage", ["escape", "truncate"])
def test_foreign_or_short_external_data_is_refused(tmp_path, damage):
    model, base, _, _ = _matmuls(tmp_path)
    a = next(t for t in model.graph.initializer if t.name == "a")
    if damage == "escape":
        next(e for e in a.external_data if e.key == "location").value = "../secret.bin"
        (tmp_path / "secret.bin").write_bytes(b"\0" * 64 * 64 * 4)
        says = "outside"
    else:
        (base / "w.bin").write_bytes(b"\0" * 100)
        says = "truncated"
    out = tmp_path / "out" / "model.onnx"
    out.parent.mkdir()
    with pytest.raises(PipelineError, match=says):
        write_gathered(model, base, out)
    assert list(out.parent.iterdir()) == []  # nothing half-written


@pytest.mark.parametrize("inline_limit", [None, "1"])
def test_an_in_memory_graph_runs_with_its_source_files(tmp_path, monkeypatch, inline_limit):
    """Both ways model_file hands ONNX Runtime a graph: its bytes and the folder of its data
    files, or (past the inline limit) a file of its own. The source's data file has the
    name the graph's own would take: nothing may collide."""
    model, base, x, expected = _matmuls(tmp_path)
    (base / "w.bin").rename(base / "model.onnx.data")
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "model.onnx.data"
    if inline_limit:
        monkeypatch.setenv(onnx_model.INLINE_LIMIT_ENV, inline_limit)
    got = onnx_runtime.run_model(model, [{"x": x}], base)[0]["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert any(t.raw_data for t in model.graph.initializer)  # the caller's weights are kept


def test_a_consumed_graph_gives_its_weights_to_the_file(tmp_path, monkeypatch):
    """A switchboard is made for ONNX Runtime and nothing else: past the inline limit its
    weights move to the file the session reads instead of being copied first (a decoder's
    search held them once more for the copy), and the graph runs the same."""
    model, base, x, expected = _matmuls(tmp_path)
    b = next(t for t in model.graph.initializer if t.name == "b")
    assert b.raw_data  # held in memory
    monkeypatch.setenv(onnx_model.INLINE_LIMIT_ENV, "1")
    with onnx_runtime.model_file(model, base, consume=True) as f:
        assert not any(t.raw_data for t in model.graph.initializer)  # all in the file
        session = onnx_runtime.ort_session(f)
        got = onnx_runtime.run_session(session, [{"x": x}], "the graph")[0]["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("typed", [False, True])
def test_saving_beside_its_own_data_file_keeps_it(tmp_path, monkeypatch, typed):
    """A graph past the inline limit rewritten where its external data already is, in a
    file named as save() names its own (`model.onnx.data`; an imported Paddle model comes
    so), its in-memory weights in raw_data or in the typed fields (float_data): the old
    file is left whole, the new weights go to a file of their own, and the graph runs."""
    model, folder, x, want = _matmuls(tmp_path)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "model.onnx.data"
    (folder / "w.bin").rename(folder / "model.onnx.data")
    if typed:
        b = next(t for t in model.graph.initializer if t.name == "b")
        b.float_data.extend(numpy_helper.to_array(b).ravel().tolist())
        b.ClearField("raw_data")
    before = (folder / "model.onnx.data").read_bytes()
    monkeypatch.setenv(onnx_model.INLINE_LIMIT_ENV, "1024")
    written = onnx_model.save(model, folder / "model.onnx")
    assert (folder / "model.onnx.data").read_bytes() == before
    assert [p.name for p in written] == ["model.onnx", "model.onnx.1.data"]
    got = onnx_runtime.run_model(onnx.load(folder / "model.onnx"), [{"x": x}], None)[0]
    np.testing.assert_allclose(got["y"], want, rtol=1e-5)


def test_a_graph_handed_as_bytes_is_never_written_out_as_text(tmp_path, monkeypatch):
    """str() of a graph's bytes is the repr of every byte, four times their size: a 220 MB
    switchboard took 2.8 s and 2 GB more to open that way."""
    model, base, x, expected = _matmuls(tmp_path)
    graph = onnx_runtime.GraphBytes(model.SerializeToString(), base)
    assert len(repr(graph)) < 200

    def refuse(self):
        raise AssertionError("the graph's bytes were turned into text")

    monkeypatch.setattr(onnx_runtime.GraphBytes, "__repr__", refuse)
    got = onnx_runtime.run_batches(graph, [{"x": x}])[0]["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
