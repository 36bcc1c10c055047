"""int4 weight-only on the bundled outlier transformer, for real: ModelOpt's AWQ and
round-to-nearest on the CPU, ONNX Runtime judging, the fallback search keeping sensitive
GEMMs, and TensorRT-RTX building the engine."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.graph import onnx_runtime
from pipeline.precision.int4 import quantize
from tests.conftest import compose
from tests.helpers import fresh, reference_pairs

MODEL = ("model=outlier_transformer",)


@pytest.fixture(scope="module")
def transformer_export(tmp_path_factory):
    layout = Layout(tmp_path_factory.mktemp("int4_export"))
    stages.export(compose(*MODEL), layout)
    return layout


def calibrated(layout: Layout, tmp_path, *overrides: str) -> tuple:
    cfg = compose(*MODEL, *overrides, f"calibration.cache_dir={tmp_path / 'cache'}")
    return cfg, stages.calibrate(cfg, layout)


@pytest.mark.parametrize("precision", ["int4_awq", "int4_rtn"])
def test_int4_with_fallback_passes_with_most_gemm_weights_in_int4_and_builds(
    transformer_export, tmp_path, precision, monkeypatch
):
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "store"))
    layout = fresh(transformer_export, tmp_path)
    cfg, summary = calibrated(layout, tmp_path, f"precision={precision}", "precision.fallback=auto")
    assert summary["gate_passed"]
    view = summary["calibration"]["int4"]
    assert view["int4_weight_share"] >= 0.75 and len(view["int4_gemms"]) >= 6
    graph = onnx.load(str(layout.calibrate_dir / "model.onnx"), load_external_data=False)
    types = {i.name: i.data_type for i in graph.graph.initializer}
    dqs = [n for n in graph.graph.node if n.op_type == "DequantizeLinear"]
    int4_dqs = [n for n in dqs if types[n.input[0]] == onnx.TensorProto.INT4]
    assert int4_dqs and all(
        any(a.name == "block_size" and a.i == 128 for a in n.attribute) for n in int4_dqs
    )
    fb = summary["fallback"]
    if precision == "int4_rtn":  # round-to-nearest misses the gate here: the search keeps
        # a GEMM, and the next type down, int8 weight-only per output channel, holds it
        assert fb["needed"] and fb["kept"] and fb["kept_int8"] == fb["kept"]
        assert fb["int8_checks"][0] == {
            "kept_above": 0,
            "kept_int8": len(fb["kept"]),
            "passed": True,
        }
        producer = {o: n for n in graph.graph.node for o in n.output}
        for node in graph.graph.node:
            if node.name in fb["kept"]:
                dq = producer[node.input[1]]
                assert types[dq.input[0]] == onnx.TensorProto.INT8, node.name
                assert [a.i for a in dq.attribute if a.name == "axis"] == [1]
        assert summary["calibration"]["gemm_weights"]["bytes"]["int8"] > 0
    assert summary["calibration"]["gemm_weights_untransposed"] >= 1  # the pooler's Gemm
    stages.fingerprint(cfg, layout)
    manifest = stages.build(cfg, layout, progress=False)
    assert manifest["engine"]["bytes"] > 0


def test_keeping_every_gemm_is_the_fp32_graph_bit_for_bit(transformer_export, tmp_path):
    cfg = compose(*MODEL, "precision=int4_rtn", f"calibration.cache_dir={tmp_path / 'cache'}")
    src = transformer_export.export_dir / "model.onnx"
    result = quantize.quantize_int4(
        src, tmp_path / "q.onnx", cfg.precision, cfg.calibration, cfg.model
    )
    graphs = result.graphs
    feeds = [p[0] for p in reference_pairs(transformer_export)]
    everything = graphs.graph(graphs.plan.candidates())
    with onnx_runtime.model_file(everything, graphs.base_dir) as f:
        got = onnx_runtime.run_batches(f, feeds)
    want = [p[1] for p in reference_pairs(transformer_export)]
    for g, w in zip(got, want):
        assert all(np.array_equal(g[k], w[k]) for k in w)
    # the search's one session gives each choice's outputs as the written graph does
    board = graphs.switchboard(feeds)
    keep = graphs.plan.candidates()[:2]
    with onnx_runtime.model_file(graphs.graph(keep), graphs.base_dir) as f:
        written = onnx_runtime.run_batches(f, feeds)
    for a, b in zip(board.outputs(keep), written):
        assert all(np.allclose(a[k], b[k], atol=1e-6) for k in b)


def test_a_target_that_cannot_run_int4_is_refused_before_any_work():
    with pytest.raises(PipelineError, match=r"SM75 cannot run int4 weights"):
        compose(*MODEL, "precision=int4_awq", "build.compute_capabilities=[SM75,SM86]")


def test_int4_with_fp16_activations_is_judged_as_built(transformer_export, tmp_path):
    layout = fresh(transformer_export, tmp_path)
    _, summary = calibrated(
        layout,
        tmp_path,
        "precision=int4_rtn",
        "precision.activations=fp16",
        "precision.fallback=auto",
    )
    assert summary["activations"]["type"] == "fp16" and summary["gate_passed"]
    graph = onnx.load(str(layout.calibrate_dir / "model.onnx"), load_external_data=False)
    assert any(n.op_type == "Cast" for n in graph.graph.node)
