"""ModelOpt AutoCast with its dead-end sweep and its redundant casts' removal in linear time
(precision/autocast/linear_cleanup.py, linear_casts.py) writes the same graph, byte for byte,
as ModelOpt's own quadratic ones: cache entries made before stay valid."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.precision.autocast.linear_cleanup import CASTS, METHOD, linear_cleanup
from tests.export.test_model_zoo import config


@pytest.mark.parametrize("model", ["light_squeezenet", "light_inception_v1"])
def test_the_linear_sweep_casts_the_same_graph_as_modelopts(tmp_path, model):
    from modelopt.onnx.autocast import convert_to_mixed_precision
    from modelopt.onnx.autocast.precisionconverter import PrecisionConverter

    layout = Layout(tmp_path)
    stages.export(config(model, "fp16"), layout)
    graph = str(layout.export_dir / "model.onnx")
    proto = onnx.load(graph, load_external_data=False)
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.random([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32)
        for i in proto.graph.input
    }
    (tmp_path / "calibration").mkdir()
    np.savez(tmp_path / "calibration" / "batch.npz", **feeds)

    def cast() -> bytes:
        return convert_to_mixed_precision(
            onnx_path=graph,
            low_precision_type="fp16",
            calibration_data=str(tmp_path / "calibration"),
            providers=["cpu"],
        ).SerializeToString()

    from modelopt.onnx import utils

    theirs, their_casts = getattr(PrecisionConverter, METHOD), getattr(utils, CASTS)
    removed, casts_removed = [], []

    def counted(self) -> None:
        before = len(self.model.graph.node)
        theirs(self)
        removed.append(before - len(self.model.graph.node))

    def casts_counted(model):
        before = len(model.graph.node)
        out = their_casts(model)
        casts_removed.append(before - len(out.graph.node))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PrecisionConverter, METHOD, counted)
        mp.setattr(utils, CASTS, casts_counted)
        expected = cast()
    with linear_cleanup():
        assert getattr(PrecisionConverter, METHOD) is not theirs
        assert getattr(utils, CASTS) is not their_casts
        got = cast()
    # put back
    assert getattr(PrecisionConverter, METHOD) is theirs and getattr(utils, CASTS) is their_casts
    assert removed and removed[0] > 0  # the sweep had dead ends to remove
    assert casts_removed and casts_removed[0] > 0  # and redundant casts
    assert got == expected


def _casts_of_every_kind() -> onnx.ModelProto:
    """A Cast to its own type (one writing a network output whose source has another
    reader), a Cast to double then to float, a Constant's Cast, and the Casts of a Constant
    read twice."""
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [
        h.make_node("Cast", ["x"], ["same"], to=T.FLOAT, name="same_type"),
        h.make_node("Relu", ["same"], ["y1"]),
        h.make_node("Cast", ["x"], ["wide"], to=T.DOUBLE, name="to_double"),
        h.make_node("Cast", ["wide"], ["y2"], to=T.FLOAT, name="back_to_float"),
        h.make_node("Constant", [], ["k"], value=h.make_tensor("kv", T.FLOAT16, [4], [1, 2, 3, 4])),
        h.make_node("Cast", ["k"], ["k32"], to=T.FLOAT, name="constant_cast"),
        h.make_node("Add", ["x", "k32"], ["y3"]),
        h.make_node("Relu", ["x"], ["r"]),
        h.make_node("Cast", ["r"], ["y4"], to=T.FLOAT, name="output_cast"),
        h.make_node("Neg", ["r"], ["y5"]),
        # a Constant with another reader keeps its Cast
        h.make_node("Constant", [], ["k2"], value=h.make_tensor("k2v", T.FLOAT16, [4], [1] * 4)),
        h.make_node("Cast", ["k2"], ["k2f"], to=T.FLOAT, name="shared_constant_cast"),
        h.make_node("Add", ["x", "k2f"], ["y6"]),
        h.make_node("Cast", ["k2"], ["y7"], to=T.FLOAT, name="other_reader"),
    ]
    outputs = [h.make_tensor_value_info(f"y{i}", T.FLOAT, [4]) for i in range(1, 8)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4])], outputs)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def test_redundant_casts_of_every_kind_go_as_modelopt_removes_them():
    from modelopt.onnx import utils

    from pipeline.precision.autocast import linear_casts

    model = _casts_of_every_kind()
    theirs, ours = onnx.ModelProto(), onnx.ModelProto()
    theirs.CopyFrom(model)
    ours.CopyFrom(model)
    getattr(utils, CASTS)(theirs)
    linear_casts.remove_redundant_casts(ours)
    assert ours.SerializeToString() == theirs.SerializeToString()
    left = {n.name for n in ours.graph.node if n.op_type == "Cast"}
    assert not {"same_type", "to_double", "constant_cast", "output_cast"} & left
    assert "shared_constant_cast" in left
