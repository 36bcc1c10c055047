"""A model file with ops of a custom domain imports (TensorRT may still refuse them, in
one line, at build); an opset onnx does not know is one line."""

import pytest
from onnx import TensorProto, helper

from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_import


def _model(domain_version):
    graph = helper.make_graph(
        [helper.make_node("Frob", ["x"], ["y"], domain="com.acme")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    imports = [helper.make_opsetid("", domain_version), helper.make_opsetid("com.acme", 1)]
    return helper.make_model(graph, opset_imports=imports)


def test_a_custom_domain_asks_for_no_ir_version():
    model = _model(17)
    onnx_import.normalize(model)  # onnx.helper.find_min_ir_version_for raised ValueError here
    assert model.ir_version >= 8


def test_an_opset_onnx_does_not_know_is_one_line():
    with pytest.raises(PipelineError, match=r"imports opsets \(ai.onnx 99\) that onnx"):
        onnx_import.normalize(_model(99))
