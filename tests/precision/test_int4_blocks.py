"""int4 blocks that divide a weight's reduction axis (rtn.fitting_block): TensorRT refuses a
partial last block, and shipped widths are not all multiples of 128 (SmolLM's hidden is
576). The streamed graph takes the largest power of two that divides, ONNX Runtime runs it
and TensorRT-RTX builds it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pipeline.graph.onnx_runtime import run_batches
from pipeline.precision.int4 import rtn


@pytest.mark.parametrize(
    ("rows", "block"), [(1536, 128), (576, 64), (688, 16), (130, 130), (96, 128)]
)
def test_the_block_divides_the_axis(rows, block):
    assert rtn.fitting_block(rows, 128) == block


def test_a_576_wide_weight_quantizes_runs_and_builds(tmp_path):
    from tests.conftest import compose

    rng = np.random.default_rng(0)
    w = rng.standard_normal((576, 256)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 576])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 256])],
        [numpy_helper.from_array(w, "w")],
    )
    source = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    made = rtn.graph(source, None, 128, [], embeddings=False)
    dq = next(n for n in made.graph.node if n.op_type == "DequantizeLinear")
    assert next(a.i for a in dq.attribute if a.name == "block_size") == 64
    path = tmp_path / "int4.onnx"
    path.write_bytes(made.SerializeToString())
    x = rng.standard_normal((2, 576)).astype(np.float32)
    y = run_batches(path, [{"x": x}])[0]["y"]
    cos = (y * (x @ w)).sum() / np.linalg.norm(y) / np.linalg.norm(x @ w)
    assert cos > 0.99
    pytest.importorskip("tensorrt_rtx")
    from pipeline.engine.build import build_engine, resolve_profiles

    cfg = compose("model=onnx_file", "profile.shapes={x: [1x576, 2x576, 4x576]}")
    profiles = resolve_profiles(cfg.profile, path)
    built = build_engine(path, cfg.precision, cfg.build, profiles, "tensorrt_rtx", progress=False)
    assert len(built.engine) > 576 * 256 // 2
