"""build.strip_weights: a plan without weights (STRIP_PLAN + REFIT_IDENTICAL), refitted from
the calibrated ONNX where it is loaded. Built for real with the installed TensorRT; the
refit needs a GPU that runs the engine."""

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pipeline.core import config, fileio
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.engine import backend, build, manifest, verify
from pipeline.flow import stages
from tests.conftest import compose

HIDDEN = 512  # 1 MiB of fp32 weights per MatMul: what a stripped plan leaves out


def weighty_onnx(path):
    """Two MatMuls with 2 MiB of weights and almost no compute."""
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal((HIDDEN, HIDDEN), dtype=np.float32) for _ in range(2))
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2"),
        ],
        "weighty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", HIDDEN])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


PROFILE = [
    {"name": "p", "inputs": {"x": {"min": [1, HIDDEN], "opt": [4, HIDDEN], "max": [8, HIDDEN]}}}
]


def build_both(onnx_path, fp):
    """(plain plan, stripped plan) of one graph, or the one line the stripped build ends in."""
    out = []
    for strip in (False, True):
        cfg = compose(f"build.strip_weights={str(strip).lower()}")
        out.append(
            build.build_engine(
                onnx_path, cfg.precision, cfg.build, PROFILE, fp["trt_flavour"], progress=False
            ).engine
        )
    return out


def test_a_stripped_plan_is_much_smaller_or_refused_in_one_line(tmp_path, built_cnn):
    """Where TensorRT can build it the plan leaves the 2 MiB of weights out; TensorRT-RTX 1.7
    on a machine without a CUDA driver refuses (its refit compile needs CUDA), and says so."""
    fp = stages.read_fingerprint(built_cnn[1])
    path = weighty_onnx(tmp_path / "weighty.onnx")
    try:
        plain, stripped = build_both(path, fp)
    except PipelineError as e:
        assert fp["gpu"] is None, f"refused with a GPU present: {e}"
        assert "build.strip_weights" in str(e) and "CUDA driver" in str(e) and "\n" not in str(e)
        return
    assert len(plain) > 2 * HIDDEN * HIDDEN * 4
    assert len(stripped) < len(plain) / 4, (len(stripped), len(plain))


def test_the_manifest_and_key_record_a_stripped_plan():
    inputs = {"onnx_sha256": "a" * 64}
    on = manifest.engine_file(1, "0", {"strip_weights": True}, inputs)
    assert on["stripped"] is True and on["refit_from"] == {"onnx_sha256": "a" * 64}
    off = manifest.engine_file(1, "0", {"strip_weights": False}, inputs)
    assert off["stripped"] is False and "refit_from" not in off
    m = {"engine": {"file": "engine.plan", "bytes": 1, "sha256": "0", "stripped": "yes"}}
    assert "engine.stripped is not a boolean" in manifest.problems(m)


def test_the_build_stage_with_strip_weights_stores_a_stripped_entry_or_nothing(tmp_path, built_cnn):
    layout = built_cnn[1]
    ws = tmp_path / "ws"
    shutil.copytree(
        layout.root / "artifacts", ws / "artifacts", ignore=shutil.ignore_patterns("build")
    )
    store = tmp_path / "store"
    strip_cfg = compose("model=cnn", "build.strip_weights=true", f"build.store_dir={store}")
    assert config.to_dict(strip_cfg.build)["strip_weights"] is True
    ws_layout = Layout(ws)
    fp = stages.read_fingerprint(ws_layout)
    try:
        stages.build(strip_cfg, ws_layout, progress=False)
    except PipelineError as e:
        assert "CUDA driver" in str(e)
        assert not list(store.glob("entries/*")), "nothing stored"
        assert not ws_layout.engine_dir(fp["id"]).exists(), "no partial output"
        return
    m = fileio.read_json(ws_layout.engine_dir(fp["id"]) / "manifest.json")
    assert m["engine"]["stripped"] is True and m["key_inputs"]["build"]["strip_weights"] is True
    assert m["engine"]["refit_from"]["onnx_sha256"] == m["inputs"]["onnx_sha256"]
    assert verify.refit_source(m, ws_layout.calibrate_dir / "model.onnx") is not None


def test_refit_source_checks_the_graph(tmp_path):
    path = weighty_onnx(tmp_path / "g.onnx")
    from pipeline.graph import onnx_model

    m = {"engine": {"stripped": True, "refit_from": {"onnx_sha256": onnx_model.sha256(path)}}}
    assert verify.refit_source(m, path) == path
    assert verify.refit_source({"engine": {"stripped": False}}, tmp_path / "none.onnx") is None
    with pytest.raises(PipelineError, match="not the graph it was built from"):
        verify.refit_source({"engine": {"stripped": True, "refit_from": {}}}, path)
    with pytest.raises(PipelineError, match="missing"):
        verify.refit_source(m, tmp_path / "gone.onnx")


@pytest.mark.gpu
def test_a_refitted_stripped_engine_computes_what_the_plain_one_does(tmp_path, built_cnn):
    """GPU: deserialize, refit from the ONNX (OnnxParserRefitter), run; the outputs match
    the plan that kept its weights."""
    from pipeline.bench import trt_runner

    fp = stages.read_fingerprint(built_cnn[1])
    if why := backend.why_engine_cannot_run(fp):
        pytest.skip(why)
    path = weighty_onnx(tmp_path / "weighty.onnx")
    plain, stripped = build_both(path, fp)
    assert len(stripped) < len(plain) / 4
    x = {"x": np.random.default_rng(1).standard_normal((4, HIDDEN), dtype=np.float32)}
    outs = []
    for name, data, refit in (("plain", plain, None), ("stripped", stripped, path)):
        (tmp_path / name).write_bytes(data)
        runner = trt_runner.EngineRunner(tmp_path / name, fp["trt_flavour"], refit_onnx=refit)
        try:
            outs.append(runner.infer(x)["y"])
        finally:
            runner.close()
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-3, atol=1e-3)
