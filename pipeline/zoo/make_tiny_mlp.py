"""Writes pipeline/zoo/onnx/tiny_mlp.onnx, the bundled example of a model given as a file:
a two-layer MLP with a dynamic batch, deterministic weights, no torch needed.

    python -m pipeline.zoo.make_tiny_mlp
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).parent / "onnx" / "tiny_mlp.onnx"


def make() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((16, 32)) * 0.3).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(np.zeros(32, np.float32), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((32, 5)) * 0.3).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(np.zeros(5, np.float32), "b2")
    nodes = [
        helper.make_node("MatMul", ["features", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="fc2"),
        helper.make_node("Add", ["h3", "b2"], ["scores"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_mlp",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 5])],
        initializer=[w1, b1, w2, b2],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="trt-pipeline"
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(make().SerializeToString())
    print(OUT)
