"""Shape-tensor inputs through TensorRT-RTX's real parser and builder: refused in one
line before TensorRT sees a profile (it used to raise out of the build and a sweep)."""

import onnx
import pytest
from onnx import TensorProto, helper

from pipeline.core.errors import PipelineError
from pipeline.engine import build
from tests.conftest import compose


def _model(path, node, data_shape):
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, data_shape),
            helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("op", ["Reshape", "Expand"])
def test_shape_tensor_input_is_refused_in_one_line(tmp_path, op):
    path = _model(tmp_path / "model.onnx", helper.make_node(op, ["x", "s"], ["y"]), [2, 1])
    cfg = compose()
    resolved = build.resolve_profiles(cfg.profile, path)  # the model's own shapes, s: [2]
    with pytest.raises(PipelineError) as e:
        build.build_engine(path, cfg.precision, cfg.build, resolved, "tensorrt_rtx", progress=False)
    message = str(e.value)
    assert message.startswith("profile 'default' input 's' is a shape tensor (int64[2]")
    assert "\n" not in message and "value ranges" in message
