"""A job's share of the cores (pipeline/core/threads.py): ONNX Runtime, which reads no
OpenMP variable, and torch follow OMP_NUM_THREADS unless the config names a count, and
the benchmark records which of them chose."""

from __future__ import annotations

from onnx import TensorProto, helper

from pipeline.core import threads
from pipeline.graph import onnx_runtime


def _graph_bytes() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_the_config_wins_then_omp_num_threads_then_the_library_default(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.intra_op(0) == (0, "library default")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.intra_op(0) == (3, "OMP_NUM_THREADS")
    assert threads.intra_op(2) == (2, "benchmark.intra_op_threads")
    for junk in ("", "0", "-1", "two"):
        monkeypatch.setenv("OMP_NUM_THREADS", junk)
        assert threads.intra_op(0) == (0, "library default"), junk


def test_onnx_runtime_sessions_follow_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    session = onnx_runtime.ort_session(_graph_bytes())
    assert session.get_session_options().intra_op_num_threads == 1
    assert (
        onnx_runtime.ort_session(_graph_bytes(), threads=2)
        .get_session_options()
        .intra_op_num_threads
        == 2
    )
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert (
        onnx_runtime.ort_session(_graph_bytes()).get_session_options().intra_op_num_threads == 0
    )  # ORT's own
