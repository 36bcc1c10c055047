"""A build TensorRT gives up on: one line, its log kept and named, and for TensorRT's own
faults in a graph with control flow, the nodes and the way out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.engine import build_hints
from pipeline.flow import stages
from tests.conftest import compose
from tests.wild import graphs


def test_a_failed_build_keeps_tensorrts_log_and_names_it(tmp_path, monkeypatch):
    """Two axes share the dim name `n`, and the profile gives them other sizes: TensorRT's
    builder refuses (the parser and ONNX Runtime do not), a real failure of
    build_serialized_network."""
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "store"))
    path = tmp_path / "shared_n.onnx"
    vi = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", "n"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [vi("x")], [vi("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    cfg = compose(
        "model=onnx_file",
        f"model.onnx_path={path}",
        f"model.source={path}",
        "profile.shapes={x: 2x3}",
        "build.backend=tensorrt_rtx",
    )
    layout = Layout(tmp_path / "run")
    stages.fingerprint(cfg, layout)
    stages.export(cfg, layout)
    stages.calibrate(cfg, layout)
    with pytest.raises(PipelineError) as e:
        stages.build(cfg, layout, progress=False)
    line = str(e.value)
    assert line.startswith("TensorRT build failed: ") and "\n" not in line
    log = Path(re.search(r"\(TensorRT's log: (.*)\)$", line).group(1))
    assert log.is_file() and log.is_relative_to(layout.root / ".cache")
    assert "ERROR" in log.read_text() or "Error" in log.read_text()
    assert not list(layout.build_dir.glob("*/engine.plan"))


def test_an_internal_error_in_a_graph_with_control_flow_names_its_nodes(tmp_path):
    path = graphs.if_sample_rate(tmp_path / "vad.onnx")
    fault = "[graphShapeAnalyzer.cpp::nodeScope] Error Code 2: Internal Error (Assertion tScope.getType() != ScopeType::kUNDEFINED failed.)"
    hint = build_hints.control_flow_hint(path, [fault])
    assert "If 'If_1'" in hint or "If '" in hint
    assert "model.constant_inputs" in hint and "newer TensorRT" in hint
    # a user's error (a bad profile) is not blamed on the control flow
    assert build_hints.control_flow_hint(path, ["Error Code 4: API Usage Error (...)"]) == ""


def squeeze_where_batch_is_one(path: Path) -> Path:
    """`x` squeezed to rank 1 where its batch is 1, else as it is: an If whose branches
    differ in rank, decided by a dynamic dim (Silero VAD's LSTM state does this)."""
    import numpy as np
    from onnx import numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    squeezed = helper.make_tensor_value_info("s", TensorProto.FLOAT, None)
    kept = helper.make_tensor_value_info("k", TensorProto.FLOAT, None)
    zero = numpy_helper.from_array(np.array([0], dtype=np.int64), "zero")
    one = numpy_helper.from_array(np.array([1], dtype=np.int64), "one")
    then = helper.make_graph(
        [helper.make_node("Squeeze", ["x", "zero"], ["s"])], "t", [], [squeezed]
    )
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["k"])], "e", [], [kept])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], start=0, end=1),
        helper.make_node("Equal", ["shape", "one"], ["is_one"]),
        helper.make_node("Squeeze", ["is_one"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])  # as exporters say
    graph = helper.make_graph(nodes, "g", [x], [y], [zero, one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def test_an_if_of_unequal_ranks_names_the_dim_that_decides_it(tmp_path, monkeypatch):
    """TensorRT refuses an If whose branches differ in rank unless its condition is known
    at build time: the line names the profile dim that decides it, and one size there
    builds."""
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "store"))
    path = squeeze_where_batch_is_one(tmp_path / "squeeze.onnx")

    def built(shapes: str, run: str) -> dict:
        cfg = compose(
            "model=onnx_file",
            f"model.onnx_path={path}",
            f"model.source={path}",
            f"profile.shapes={shapes}",
            "build.backend=tensorrt_rtx",
        )
        layout = Layout(tmp_path / run)
        stages.fingerprint(cfg, layout)
        stages.export(cfg, layout)
        stages.calibrate(cfg, layout)
        return stages.build(cfg, layout, progress=False)

    with pytest.raises(PipelineError) as e:
        built("{x: [1x4, 2x4, 4x4]}", "dynamic")
    line = str(e.value)
    assert build_hints.UNEQUAL_RANKS in line and "\n" not in line
    assert "chosen by dim 'batch'" in line and "min = opt = max" in line
    # where the dim has no name, TensorRT names it by the input's shape (Silero VAD's state)
    vad = "Dimensions are [128] and [(# 1 (SHAPE state)),128]."
    assert "chosen by axis 1 of input 'state':" in build_hints.ranks_hint(
        [build_hints.UNEQUAL_RANKS + vad]
    )
    assert built("{x: [1x4, 1x4, 1x4]}", "fixed")["engine"]["bytes"] > 0
