"""Real TensorRT-RTX builds on the CPU."""

import onnx
import pytest
from onnx import TensorProto, helper

from pipeline.analysis import buildlog
from pipeline.core import fileio, hashing
from pipeline.core.errors import PipelineError
from pipeline.engine import build
from pipeline.flow import stages
from tests.conftest import REPO, compose


def test_cnn_build_writes_engine_and_manifest(built_cnn):
    _, layout = built_cnn
    fp = stages.read_fingerprint(layout)
    d = layout.engine_dir(fp["id"])
    manifest = fileio.read_json(d / "manifest.json")
    engine = (d / "engine.plan").read_bytes()
    assert len(engine) > 10_000
    assert manifest["engine"]["sha256"] == hashing.sha256_bytes(engine)
    assert manifest["backend"]["flavour"] in ("tensorrt_rtx", "tensorrt")
    assert manifest["inputs"]["onnx_sha256"] == hashing.sha256_file(
        layout.calibrate_dir / "model.onnx"
    )
    assert manifest["config"]["profiles"][0]["inputs"]["images"]["opt"] == [8, 3, 32, 32]
    assert manifest["log"]["counts"]["verbose"] > 0
    assert manifest["log"]["layers_original"] >= manifest["log"]["layers_final"] >= 1
    assert manifest["fingerprint"] == fp
    assert "Original:" in (d / "build.log").read_text()


def test_transformer_builds_with_two_profiles(tmp_path, built_transformer):
    cfg, layout = built_transformer
    resolved = build.resolve_profiles(
        compose("model=transformer", "profile=two_profiles").profile,
        layout.calibrate_dir / "model.onnx",
    )
    result = build.build_engine(
        layout.calibrate_dir / "model.onnx",
        cfg.precision,
        cfg.build,
        resolved,
        stages.read_fingerprint(layout)["trt_flavour"],
        progress=False,
    )
    assert len(result.engine) > 10_000
    summary = buildlog.summarize(result.records)
    assert summary["counts"]["error"] == 0
    assert any("optimization profile number 1" in r.message for r in result.records)


def test_network_dump_has_types_and_shapes(built_cnn):
    _, layout = built_cnn
    fp = stages.read_fingerprint(layout)
    layers = fileio.read_json(layout.engine_dir(fp["id"]) / "network.json")
    conv = next(l for l in layers if l["type"] == "convolution")
    assert conv["outputs"][0]["dtype"] == "float"
    assert conv["outputs"][0]["shape"][1:] == [16, 32, 32]


def _custom_op_model(path):
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", name="frob")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    onnx.save(model, path)


def test_unsupported_op_is_a_parse_error_naming_the_node(tmp_path):
    _custom_op_model(tmp_path / "custom.onnx")
    cfg = compose()
    with pytest.raises(PipelineError, match=r"cannot parse custom.onnx.*Frobnicate"):
        build.build_engine(
            tmp_path / "custom.onnx",
            cfg.precision,
            cfg.build,
            [{"name": "p", "inputs": {"x": {"min": [1, 4], "opt": [1, 4], "max": [1, 4]}}}],
            "tensorrt_rtx",
            progress=False,
        )


def test_profile_for_wrong_input_name_fails_before_building(tmp_path):
    cfg = compose()
    with pytest.raises(PipelineError, match="names input 'pixels'"):
        build.build_engine(
            REPO / "pipeline/zoo/onnx/tiny_mlp.onnx",
            cfg.precision,
            cfg.build,
            [{"name": "p", "inputs": {"pixels": {"min": [1, 16], "opt": [1, 16], "max": [1, 16]}}}],
            "tensorrt_rtx",
            progress=False,
        )


def test_weak_typing_is_refused_with_the_strong_alternative():
    cfg = compose("precision.mode=weak")
    with pytest.raises(PipelineError, match="precision.mode=strong"):
        build.build_engine(
            REPO / "pipeline/zoo/onnx/tiny_mlp.onnx",
            cfg.precision,
            cfg.build,
            [],
            "tensorrt_rtx",
            progress=False,
        )


def test_hardware_compatibility_is_refused_on_rtx():
    cfg = compose("build.hardware_compatibility=ampere_plus")
    resolved = build.resolve_profiles(cfg.profile, REPO / "pipeline/zoo/onnx/tiny_mlp.onnx")
    with pytest.raises(PipelineError, match="hardware_compatibility"):
        build.build_engine(
            REPO / "pipeline/zoo/onnx/tiny_mlp.onnx",
            cfg.precision,
            cfg.build,
            resolved,
            "tensorrt_rtx",
            progress=False,
        )


def test_profiles_are_resolved_without_reading_external_weights(tmp_path):
    """The build's profile fallback reads the graph's inputs only: its weights stay on disk
    for TensorRT's parser (here the data file is gone, and nothing notices)."""
    import numpy as np
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.ones((64, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(
        model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0
    )
    (tmp_path / "m.data").unlink()
    [prof] = build.resolve_profiles(compose().profile, tmp_path / "m.onnx")
    assert prof["inputs"]["x"]["opt"][1] == 64
