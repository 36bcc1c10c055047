"""SmoothQuant on the ONNX graph (pipeline/precision/qdq/smoothing.py): the fp32 function is
kept, the outliers move into the weights, and int8 keeps more MatMuls quantized."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pipeline.core.errors import PipelineError
from pipeline.flow import stages
from pipeline.graph import onnx_runtime
from pipeline.precision.qdq import smoothing
from tests.conftest import compose
from tests.helpers import fresh, quantized, reference_pairs

BERT = ("model=outlier_bert", "precision=int8")


def pre_ln_graph() -> onnx.ModelProto:
    """x -> LayerNorm -> two MatMuls (a pre-LN block: only MatMuls read the LayerNorm),
    with two input channels 50x the rest."""
    rng = np.random.default_rng(0)
    d, out = 16, 8
    inits = [
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(d)).astype(np.float32), "gamma"),
        numpy_helper.from_array((0.1 * rng.standard_normal(d)).astype(np.float32), "beta"),
        numpy_helper.from_array(rng.standard_normal((d, out)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((d, out)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], name="ln", axis=-1),
        helper.make_node("MatMul", ["h", "w1"], ["y1"], name="mm1"),
        helper.make_node("MatMul", ["h", "w2"], ["y2"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes,
        "pre_ln",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", d])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["n", out]) for y in ("y1", "y2")],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def outlier_feeds() -> list[dict]:
    """One batch of the pre-LN graph's input with two channels 50x the rest."""
    x = np.random.default_rng(1).standard_normal((64, 16)).astype(np.float32)
    x[:, [3, 11]] *= 50.0
    return [{"x": x}]


def run(model, feeds):
    return onnx_runtime.run_batches(model.SerializeToString(), feeds)


def test_pre_ln_folds_into_the_layer_norm_and_keeps_the_function():
    model = pre_ln_graph()
    feeds = outlier_feeds()
    groups = smoothing.compute(
        model, 0.5, lambda ts: smoothing.activation_max(model, None, ts, feeds)
    )
    [g] = groups
    assert g.fold and set(g.matmuls) == {"mm1", "mm2"}
    smoothed = smoothing.apply(model, groups)
    assert [n.op_type for n in smoothed.graph.node] == [n.op_type for n in model.graph.node]
    for a, b in zip(run(model, feeds), run(smoothed, feeds)):
        for k in a:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-5)
    # the activation the MatMuls read is flatter: its largest channel nearer the median
    h_max = smoothing.activation_max(model, None, ["h"], feeds)["h"]
    hs_max = smoothing.activation_max(smoothed, None, ["h"], feeds)["h"]
    assert hs_max.max() / np.median(hs_max) < h_max.max() / np.median(h_max)


def test_an_untransposed_gemm_smooths_like_a_matmul_and_a_transposed_one_does_not():
    """GPT-2's Conv1D exports as Gemm(x, W [in, out], bias): smoothed as a MatMul, the bias
    left as it is; a Gemm with transB reads W [out, in] and is not a channel-wise product
    of the kind smoothing scales."""
    model = pre_ln_graph()
    bias = numpy_helper.from_array(np.ones(8, np.float32), "bias")
    model.graph.initializer.append(bias)
    model.graph.node[1].CopyFrom(helper.make_node("Gemm", ["h", "w1", "bias"], ["y1"], name="mm1"))
    feeds = outlier_feeds()
    groups = smoothing.compute(
        model, 0.5, lambda ts: smoothing.activation_max(model, None, ts, feeds)
    )
    assert [set(g.matmuls) for g in groups] == [{"mm1", "mm2"}]
    for a, b in zip(run(model, feeds), run(smoothing.apply(model, groups), feeds)):
        for k in a:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-4)
    model.graph.node[1].attribute.append(helper.make_attribute("transB", 1))
    assert [set(g[2]) for g in smoothing.find_groups(model)] == [{("mm2", "w2")}]


def test_the_smoothing_record_names_its_groups_for_the_cache_key():
    """Two smoothings of one graph, data and alpha with other groups (another version of
    the code that finds them) are other calibrations: their records' digests differ."""
    group = smoothing.SmoothGroup("h", "ln", ("mm1",), ("w1",), True, (1.0, 2.0))
    other = smoothing.SmoothGroup("h", "ln", ("mm1", "mm2"), ("w1", "w2"), True, (1.0, 2.0))
    a, b = (smoothing.record(g, 0.5, "smoothquant") for g in ([group], [other]))
    assert a["groups_sha256"] != b["groups_sha256"]


def test_post_ln_smooths_on_the_matmul_branch_and_keeps_the_function(bert_export, tmp_path):
    _, result = quantized(bert_export, tmp_path, *BERT, "precision.smoothing=smoothquant")
    graphs = result.graphs
    assert graphs.smooth and any(not g.fold for g in graphs.smooth)
    muls = [n for n in graphs.smoothed().graph.node if n.name.endswith("_smooth_Mul")]
    assert len(muls) == sum(1 for g in graphs.smooth if not g.fold)
    feeds = [p[0] for p in reference_pairs(bert_export)]
    for got, (_, ref) in zip(graphs.run(graphs.smoothed(), feeds), reference_pairs(bert_export)):
        np.testing.assert_allclose(got["embedding"], ref["embedding"], rtol=1e-5, atol=1e-5)
    # with every node kept, no smoothing is left either: the fp32 graph bit for bit
    everything = graphs.graph(graphs.plan.candidates())
    assert not [n for n in everything.graph.node if n.name.endswith("_smooth_Mul")]
    for got, (_, ref) in zip(graphs.run(everything, feeds), reference_pairs(bert_export)):
        np.testing.assert_array_equal(got["embedding"], ref["embedding"])


def test_switchboard_runs_what_the_written_graph_runs(bert_export, tmp_path):
    _, result = quantized(bert_export, tmp_path, *BERT, "precision.smoothing=smoothquant")
    graphs = result.graphs
    feeds = [p[0] for p in reference_pairs(bert_export)]
    board = graphs.switchboard(feeds)
    candidates = graphs.plan.candidates()
    # a post-LN model smooths on Mul branches only: the search's numbers are the written
    # graph's, bit for bit (a group folded into a LayerNorm would differ by fp32 rounding)
    assert not any(g.fold for g in graphs.smooth)
    for keep in ([], candidates[:3], candidates[1::2], candidates):
        for a, b in zip(board.outputs(keep), graphs.run(graphs.graph(keep), feeds)):
            np.testing.assert_array_equal(a["embedding"], b["embedding"])


def test_smoothquant_passes_int8_with_more_matmuls_quantized(bert_export, tmp_path):
    def calibrate(*extra):
        layout = fresh(bert_export, tmp_path / "_".join(extra).replace("=", "-"))
        cfg = compose(
            *BERT, "precision.fallback=auto", *extra, f"calibration.cache_dir={tmp_path / 'c'}"
        )
        return stages.calibrate(cfg, layout)

    plain, smoothed = calibrate(), calibrate("precision.smoothing=smoothquant")
    assert plain["gate_passed"] and smoothed["gate_passed"]
    kept = lambda s: len((s["fallback"] or {}).get("kept", []))
    assert kept(smoothed) < kept(plain)
    flops = lambda s: s["calibration"]["gemm_flops"]["quantized_fraction"]
    assert flops(smoothed) >= 0.9 and flops(smoothed) > flops(plain)
    record = smoothed["calibration"]["smoothing"]
    assert record["mode"] == "smoothquant" and record["alpha"] == 0.5 and record["groups"]


def test_nothing_to_smooth_is_one_line_and_auto_leaves_the_graph(cnn_export, tmp_path):
    with pytest.raises(PipelineError, match=r"nothing to smooth and nothing was changed") as e:
        quantized(
            cnn_export, tmp_path, "model=cnn", "precision=int8", "precision.smoothing=smoothquant"
        )
    assert "\n" not in str(e.value)
    _, result = quantized(
        cnn_export, tmp_path, "model=cnn", "precision=int8", "precision.smoothing=auto"
    )
    assert result.graphs.smooth == [] and "graph unchanged" in result.summary["smoothing"]["note"]


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "precision.smoothing_alpha=1.5",
            r"precision.smoothing_alpha=1.5; expected a number in \[0, 1\]",
        ),
        (
            "precision.smoothing=lots",
            r"precision.smoothing: Invalid value 'lots', expected one of \[none, smoothquant, auto\]",
        ),
    ],
)
def test_bad_smoothing_settings_are_one_line(override, message):
    with pytest.raises(PipelineError, match=message):
        compose("precision=int8", override)


def test_smoothing_is_for_quantized_precisions_only():
    with pytest.raises(PipelineError, match=r"smoothing prepares a graph for int8/fp8"):
        compose("precision=fp16", "precision.smoothing=auto")


def engine_layers(cfg, onnx_path, monkeypatch) -> list[dict]:
    """The engine's own layers from a real TensorRT-RTX build with DETAILED verbosity."""
    from pipeline.analysis import plan_dump
    from pipeline.engine import build

    configure = build.configure

    def detailed(trt, *args, **kwargs):
        config = configure(trt, *args, **kwargs)
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
        return config

    monkeypatch.setattr(build, "configure", detailed)
    profiles = build.resolve_profiles(cfg.profile, onnx_path)
    result = build.build_engine(
        onnx_path, cfg.precision, cfg.build, profiles, "tensorrt_rtx", progress=False
    )
    dumps = [d for r in result.records if (d := plan_dump.parse_plan_dump(r.message))]
    assert dumps, "no DETAILED layer dump in the build log"
    return dumps[0]["layers"]


def test_tensorrt_fuses_the_smoothing_mul_into_the_quantizing_kernel(
    bert_export, tmp_path, monkeypatch
):
    """The per-channel Mul adds no engine layer: TensorRT computes it in the kernel that
    quantizes the MatMuls' input, and every smoothed MatMul still reads int8."""
    from pipeline.core import fileio

    layers = {}
    for smooth in ("none", "smoothquant"):
        cfg, result = quantized(
            bert_export, tmp_path / smooth, *BERT, f"precision.smoothing={smooth}"
        )
        path = tmp_path / smooth / "model.onnx"
        fileio.write_bytes(path, result.graphs.graph().SerializeToString())
        layers[smooth] = engine_layers(cfg, path, monkeypatch)
    assert len(layers["smoothquant"]) == len(layers["none"])
    gemms = [l for l in layers["smoothquant"] if l["type"] == "gemm"]
    assert gemms and all(l["inputs"][0]["dtype"] == "int8" for l in gemms), gemms
