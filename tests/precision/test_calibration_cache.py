"""Calibration-cache entries of graphs past onnx_model's inline limit: the graph and its
external-data file, put into the store from disk (copied, hashed by streaming) and
written out as copies beside the graph (onnx refuses linked external data)."""

from __future__ import annotations

import hashlib

import numpy as np
import onnxruntime as ort

from models import large_table
from pipeline.graph import onnx_model
from pipeline.precision.calibration import cache
from pipeline.store import FileOnDisk, VerifiedStore


def test_entry_holds_graph_and_external_data(tmp_path, monkeypatch):
    src = large_table.write(tmp_path / "src", mib=2, files=2)
    feeds = {"ids": np.array([[1, 2, 3]], np.int64)}
    want = ort.InferenceSession(str(src)).run(None, feeds)[0]
    monkeypatch.setattr(onnx_model, "INLINE_LIMIT", 1 << 20)
    work = tmp_path / "work"
    work.mkdir()
    files = cache.graph_files(onnx_model.load(src, check=False), work)
    assert isinstance(files["model.onnx.data"], FileOnDisk)
    store = VerifiedStore(tmp_path / "cache", required=("model.onnx",))
    key = "a" * 64
    made = store.get_or_make(key, lambda: (files, {}, "miss"))
    meta = made.served.meta["files"]["model.onnx.data"]
    data = (work / "model.onnx.data").read_bytes()
    assert meta == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    for got, name in ((made, "miss"), (store.get_or_make(key, lambda: ({}, {}, "x")), "hit")):
        dest = tmp_path / name / "model.onnx"
        dest.parent.mkdir()
        cache.write_graph(got, dest)
        assert sorted(p.name for p in dest.parent.iterdir()) == ["model.onnx", "model.onnx.data"]
        assert (dest.parent / "model.onnx.data").stat().st_nlink == 1  # a copy, not a link
        out = ort.InferenceSession(str(dest)).run(None, feeds)[0]
        np.testing.assert_array_equal(out, want)
    # a damaged data file in the store is found by the streamed hash, never served
    (store.entries / key / "model.onnx.data").write_bytes(b"bad")
    assert store.problems(key) == [f"model.onnx.data is 3 bytes, expected {len(data)} (truncated?)"]
