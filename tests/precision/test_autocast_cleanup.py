"""ModelOpt AutoCast with its dead-end sweep in linear time (precision/autocast/linear_cleanup.py)
writes the same graph, byte for byte, as ModelOpt's own quadratic sweep: cache entries made
before stay valid."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.precision.autocast.linear_cleanup import METHOD, linear_cleanup
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

    theirs = getattr(PrecisionConverter, METHOD)
    removed = []

    def counted(self) -> None:
        before = len(self.model.graph.node)
        theirs(self)
        removed.append(before - len(self.model.graph.node))

    setattr(PrecisionConverter, METHOD, counted)
    try:
        expected = cast()
    finally:
        setattr(PrecisionConverter, METHOD, theirs)
    with linear_cleanup():
        assert getattr(PrecisionConverter, METHOD) is not theirs
        got = cast()
    assert getattr(PrecisionConverter, METHOD) is theirs  # put back
    assert removed and removed[0] > 0  # the sweep had dead ends to remove
    assert got == expected
