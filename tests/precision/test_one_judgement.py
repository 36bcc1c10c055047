"""One judgement: the fallback search measures its choices in one ONNX Runtime session (the
switchboard, a Where in front of every quantized input), the stage judges the graph it
writes; both must give the same figures. ONNX Runtime's basic fusions of a Conv with the
BatchNormalization after it folded the BN into the int8 weights of the written graph and
not in the switchboard (a Where blocks them), so a PP layout detector's search measured
rel_error 0.0456 for the graph it chose and the stage judged that graph 0.0460."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.graph import onnx_runtime
from pipeline.inputs import reference_file
from tests.conftest import compose
from tests.helpers import quantized


def _conv_bn(path: Path, channels: int = 32, layers: int = 4) -> Path:
    """Conv -> BatchNormalization -> Relu, `layers` times, as paddle2onnx writes a CNN (the
    BN not folded into the Conv)."""
    rng = np.random.default_rng(0)
    nodes, inits, x, c_in = [], [], "x", 3
    for i in range(layers):
        w = (rng.standard_normal((channels, c_in, 3, 3)) / np.sqrt(9 * c_in)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        for name, value in (
            ("scale", rng.uniform(0.5, 2.0, channels)),
            ("bias", rng.standard_normal(channels) * 0.1),
            ("mean", rng.standard_normal(channels) * 0.1),
            ("var", rng.uniform(0.5, 2.0, channels)),
        ):
            inits.append(numpy_helper.from_array(value.astype(np.float32), f"{name}{i}"))
        nodes += [
            helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"),
            helper.make_node(
                "BatchNormalization",
                [f"c{i}", f"scale{i}", f"bias{i}", f"mean{i}", f"var{i}"],
                [f"b{i}"],
                name=f"bn{i}",
            ),
            helper.make_node("Relu", [f"b{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        x, c_in = f"r{i}", channels
    graph = helper.make_graph(
        nodes,
        "conv_bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", channels, 32, 32])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_the_written_graph_gives_the_figures_the_search_measured(tmp_path):
    path = _conv_bn(tmp_path / "conv_bn.onnx")
    overrides = (
        "model=onnx_file",
        f"model.onnx_path={path}",
        "profile.shapes={x: [1x3x32x32, 4x3x32x32, 8x3x32x32]}",
        "calibration.source=random",
        "calibration.num_samples=16",
        "precision=int8",
    )
    layout = Layout(tmp_path / "run")
    stages.export(compose(*overrides), layout)
    _, result = quantized(layout, tmp_path, *overrides)
    graphs = result.graphs
    batches = [p[0] for p in reference_file.read(layout.export_dir / "reference.npz")]
    board = graphs.switchboard(batches)
    candidates = graphs.plan.candidates()
    for keep in ([], candidates[:2], candidates):
        searched = board.outputs(keep)
        written = onnx_runtime.run_model(graphs.graph(keep), batches, graphs.base_dir)
        for s, w in zip(searched, written):
            assert all(np.array_equal(s[k], w[k]) for k in s), keep
