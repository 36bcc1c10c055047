"""A build TensorRT gives up on: one line, its log kept and named, and for TensorRT's own
faults in a graph with control flow, the nodes and the way out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.engine import build
from pipeline.flow import steps
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
    steps.fingerprint(cfg, layout)
    steps.export(cfg, layout)
    steps.calibrate(cfg, layout)
    with pytest.raises(PipelineError) as e:
        steps.build(cfg, layout, progress=False)
    line = str(e.value)
    assert line.startswith("TensorRT build failed: ") and "\n" not in line
    log = Path(re.search(r"\(TensorRT's log: (.*)\)$", line).group(1))
    assert log.is_file() and log.is_relative_to(layout.root / ".cache")
    assert "ERROR" in log.read_text() or "Error" in log.read_text()
    assert not list(layout.build_dir.glob("*/engine.plan"))


def test_an_internal_error_in_a_graph_with_control_flow_names_its_nodes(tmp_path):
    path = graphs.if_sample_rate(tmp_path / "vad.onnx")
    fault = "[graphShapeAnalyzer.cpp::nodeScope] Error Code 2: Internal Error (Assertion tScope.getType() != ScopeType::kUNDEFINED failed.)"
    hint = build.control_flow_hint(path, [fault])
    assert "If 'If_1'" in hint or "If '" in hint
    assert "model.constant_inputs" in hint and "newer TensorRT" in hint
    # a user's error (a bad profile) is not blamed on the control flow
    assert build.control_flow_hint(path, ["Error Code 4: API Usage Error (...)"]) == ""
