"""A parse failure through TensorRT-RTX's real ONNX parser ends in one line that names
the node, its op and domain, the parser's own words and a way out."""

import onnx
import pytest
from onnx import TensorProto, helper

from pipeline.core.errors import PipelineError
from pipeline.engine import backend, build, interrupt
from pipeline.engine.trt_hooks import make_logger


def _one_op(path, op, domain="", opset=17, name=""):
    node = helper.make_node(op, ["x"], ["y"], domain=domain, name=name)
    imports = [helper.make_opsetid("", opset)] + (
        [helper.make_opsetid(domain, 1)] if domain else []
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    onnx.save(helper.make_model(graph, opset_imports=imports), path)
    return path


def _parse_error(path) -> str:
    trt = backend.import_flavour("tensorrt_rtx")
    logger = make_logger(trt)
    # as the build does: no cyclic collection inside TensorRT's callbacks (interrupt.py)
    with pytest.raises(PipelineError) as e, interrupt.tensorrt_scope():
        build.parse_onnx(trt, trt.Builder(logger), logger, path, strongly_typed=True)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_standard_op_without_importer_names_node_domain_parser_text_and_way_out(tmp_path):
    message = _parse_error(_one_op(tmp_path / "model.onnx", "Unique", name="dedupe"))
    assert message.startswith("TensorRT cannot parse model.onnx: node 0 'dedupe' (op Unique, ")
    assert "domain ai.onnx, opset 17" in message
    # the parser's own text and error code, as TensorRT-RTX gives them
    assert '"false" (UNSUPPORTED_NODE in checkUnique)' in message
    assert "no importer for the ONNX op Unique" in message
    assert "build.plugins" in message


def test_custom_domain_op_says_where_it_comes_from(tmp_path):
    message = _parse_error(_one_op(tmp_path / "model.onnx", "Frobnicate", domain="com.acme"))
    assert "node 0 (op Frobnicate, domain com.acme, opset 1)" in message
    assert "Plugin not found" in message and "INVALID_NODE" in message
    assert "Frobnicate is not an ONNX op (domain com.acme)" in message
    assert "whatever wrote the model" in message and "build.plugins" in message


def test_a_known_domain_names_its_origin_and_further_errors_are_counted(tmp_path):
    nodes = [
        helper.make_node("Unique", ["x"], ["y"]),
        helper.make_node("FastGelu", ["x"], ["z"], domain="com.microsoft"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")],
    )
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(graph, opset_imports=imports), tmp_path / "two.onnx")
    message = _parse_error(tmp_path / "two.onnx")
    assert "cannot parse two.onnx: node 0 (op Unique" in message
    assert message.endswith("(+1 more error(s), ops: FastGelu)")


def test_a_node_inside_a_local_function_names_the_calling_node(tmp_path):
    inner = helper.make_node("Unique", ["a"], ["b"], name="inner_unique")
    fn = helper.make_function(
        "local.fn", "Dedup", ["a"], ["b"], [inner], [helper.make_opsetid("", 17)]
    )
    graph = helper.make_graph(
        [helper.make_node("Dedup", ["x"], ["y"], domain="local.fn", name="outer")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
    )
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("local.fn", 1)]
    model = helper.make_model(graph, opset_imports=imports, functions=[fn])
    onnx.save(model, tmp_path / "fn.onnx")
    message = _parse_error(tmp_path / "fn.onnx")
    assert (
        "'inner_unique' inside local function outer (Dedup) (op Unique, domain ai.onnx" in message
    )


def test_an_op_tensorrt_builds_from_an_unloaded_plugin_says_so(tmp_path):
    nodes = [
        helper.make_node("NonZero", ["x"], ["i"]),
        helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n"])],
    )
    onnx.save(helper.make_model(graph), tmp_path / "nonzero.onnx")
    message = _parse_error(tmp_path / "nonzero.onnx")
    assert "(op NonZero, domain ai.onnx" in message and "plugin registry" in message
    assert "imports NonZero through a plugin that no loaded library registers" in message
