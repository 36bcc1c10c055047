"""Transforms in bounded memory (calibration.streaming): the streamed int8/fp8 scales and
int4 round-to-nearest weights against ModelOpt's own on the bundled models (the same
numbers, so a model takes the same graph whichever way it was calibrated), a model with
its weights in external data streamed by default, and what cannot stream said in one line."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.graph import onnx_model
from pipeline.precision.autocast import cast
from pipeline.precision.int4.quantize import quantize_int4
from pipeline.precision.qdq import quantize
from tests.conftest import compose
from tests.helpers import fresh, int4_tensors, quantized, reference_pairs


def _quantize(layout, tmp_path, model, precision, streaming, method="max"):
    cfg = compose(
        f"model={model}",
        f"precision={precision}",
        f"calibration.method={method}",
        f"calibration.streaming={streaming}",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    src = layout.export_dir / "model.onnx"
    make = quantize_int4 if precision.startswith("int4") else quantize.quantize
    return make(src, tmp_path / f"{streaming}.onnx", cfg.precision, cfg.calibration, cfg.model)


def _scales(plan) -> dict:
    return {
        edge: (numpy_helper.to_array(s.scale), s.q_attrs, s.dq_attrs, s.zero_point.data_type)
        for edge, s in plan.edges.items()
    }


@pytest.mark.parametrize(
    ("fixture", "model", "mode", "method"),
    [
        ("bert_export", "outlier_bert", "int8", "max"),
        ("bert_export", "outlier_bert", "int8", "entropy"),
        ("bert_export", "outlier_bert", "fp8", "max"),
        ("cnn_export", "cnn", "int8", "max"),
        ("cnn_export", "cnn", "int8", "entropy"),
    ],
)
def test_streamed_scales_are_modelopts(request, tmp_path, fixture, model, mode, method):
    """entropy: ONNX Runtime's histogram collector fed batch by batch as ModelOpt feeds
    it, so the same bins and the same KL thresholds."""
    layout = request.getfixturevalue(fixture)
    theirs = _quantize(layout, tmp_path, model, mode, "never", method)
    ours = _quantize(layout, tmp_path, model, mode, "always", method)
    assert theirs.summary["calibrated_by"] == "modelopt"
    assert ours.summary["calibrated_by"].startswith("streamed")
    a, b = _scales(ours.graphs.plan), _scales(theirs.graphs.plan)
    gemm_edges = {e for e in b if theirs.graphs.plan.op_types[e[0]] in ("MatMul", "Gemm", "Conv")}
    assert set(a) == gemm_edges  # the same GEMMs quantized, the same inputs
    for edge in a:
        np.testing.assert_array_equal(a[edge][0], b[edge][0], err_msg=str(edge))
        assert a[edge][1:] == b[edge][1:], edge
    if method == "entropy":  # its thresholds, not the max
        by_max = _scales(_quantize(layout, tmp_path / "max", model, mode, "always").graphs.plan)
        assert any((a[e][0] != by_max[e][0]).any() for e in a)


def _raised(fold, *args):
    """The type of what `fold(*args)` raises, None if nothing."""
    try:
        fold(*args)
    except Exception as e:
        return type(e)
    return None


def test_the_histogram_fold_is_modelopts_collect_value():
    """ranges.fold_histogram is a port (ModelOpt's module imports torch): the same bins,
    edges and ends as theirs, batch after batch, on ranges that widen, inf and nan ends,
    float16 and an empty batch."""
    from modelopt.onnx.quantization.ort_patching import _collect_value
    from onnxruntime.quantization.calibrate import HistogramCollector

    from pipeline.precision.calibration.ranges import ENTROPY_BINS, fold_histogram

    def collector():
        return HistogramCollector("entropy", False, ENTROPY_BINS, ENTROPY_BINS, 99.999, "same")

    rng = np.random.default_rng(0)
    batches = {
        "widening": [rng.normal(0, s, (4, 33)).astype(np.float32) for s in (1.0, 0.5, 3.0)],
        "ends": [np.array([1.0, -np.inf, 2.0], np.float32), np.array([np.nan, 0.5], np.float32)],
        "half": [rng.normal(0, 1e-3, (64,)).astype(np.float16)],
        "empty": [np.zeros((0, 4), np.float32), np.ones((2, 4), np.float32)],
    }
    ours, theirs = collector(), collector()
    for name, arrays in batches.items():
        for x in arrays:
            raised = (
                _raised(fold_histogram, ours, name, x),
                _raised(_collect_value, theirs, {name: [x]}),
            )
            assert raised[0] == raised[1], (name, raised)  # the same failure where theirs fails
            a, b = ours.histogram_dict[name], theirs.histogram_dict[name]
            for mine, its in zip(a, b, strict=True):
                np.testing.assert_array_equal(mine, its, err_msg=name)
                assert np.asarray(mine).dtype == np.asarray(its).dtype, name
    assert ours.compute_collection_result().keys() == set(batches)


@pytest.mark.parametrize("precision", ["int4_rtn", "int4_awq"])
def test_streamed_int4_weights_are_modelopts_bit_for_bit(
    bert_export, tmp_path, monkeypatch, precision
):
    """int4_awq: ModelOpt's clip search on the tokens it samples, one weight at a time, a
    few output columns at a time (the bound lowered so that every weight is sliced): the
    same clip ratio for every block."""
    from pipeline.precision.int4 import awq

    monkeypatch.setattr(awq, "SEARCH_BYTES", 1 << 16)
    theirs = _quantize(bert_export, tmp_path, "outlier_bert", precision, "never")
    ours = _quantize(bert_export, tmp_path, "outlier_bert", precision, "always")
    if precision == "int4_awq":
        assert ours.summary["awq_tokens"].endswith("ModelOpt's"), ours.summary
        rtn = _quantize(bert_export, tmp_path / "rtn", "outlier_bert", "int4_rtn", "always")
        a, b = int4_tensors(ours.graphs), int4_tensors(rtn.graphs)
        clipped = [n for n in a if n.endswith("_scale") and (a[n] < b[n]).any()]
        assert clipped, "the clip search kept every block at its max"
    assert ours.graphs.plan.weights.keys() == theirs.graphs.plan.weights.keys()
    assert len(ours.graphs.plan.weights) >= 12
    a, b = int4_tensors(ours.graphs), int4_tensors(theirs.graphs)
    assert a.keys() == b.keys() and a
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _cast(layout, tmp_path, model, low, streaming):
    cfg = compose(
        f"model={model}",
        f"precision={low}",
        f"calibration.streaming={streaming}",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    feeds = reference_pairs(layout)[0][0]
    dest = tmp_path / streaming / "model.onnx"
    dest.parent.mkdir()
    src = layout.export_dir / "model.onnx"
    record = cast.autocast(src, dest, cfg.precision, cfg.calibration, feeds)
    return record, onnx_model.load(dest, check=False)


@pytest.mark.parametrize(
    ("fixture", "model", "low"),
    [("bert_export", "outlier_bert", "fp16"), ("cnn_export", "cnn", "bf16")],
)
def test_streamed_autocast_is_modelopts_node_for_node(request, tmp_path, fixture, model, low):
    layout = request.getfixturevalue(fixture)
    theirs_record, theirs = _cast(layout, tmp_path, model, low, "never")
    ours_record, ours = _cast(layout, tmp_path, model, low, "always")
    assert theirs_record["calibrated_by"] == "modelopt"
    assert ours_record["calibrated_by"].startswith("streamed")
    assert [(n.op_type, list(n.input), list(n.output)) for n in ours.graph.node] == [
        (n.op_type, list(n.input), list(n.output)) for n in theirs.graph.node
    ]
    assert [n.attribute for n in ours.graph.node] == [n.attribute for n in theirs.graph.node]
    a = {i.name: numpy_helper.to_array(i) for i in ours.graph.initializer}
    b = {i.name: numpy_helper.to_array(i) for i in theirs.graph.initializer}
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (("precision=int8", "precision.qdq_placement=modelopt"), "precision.qdq_placement"),
    ],
)
def test_what_cannot_stream_is_one_line(bert_export, tmp_path, overrides, says):
    cfg = compose(
        "model=outlier_bert",
        *overrides,
        "calibration.streaming=always",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    with pytest.raises(PipelineError, match=f"cannot stream {says}"):
        stages.calibrate(cfg, fresh(bert_export, tmp_path))


def computed_weight_model(path):
    """A Conv whose weight a ConstantOfShape makes (as ONNX's own test models do) and a
    MatMul whose weight is stored."""
    from onnx import TensorProto, helper

    shape = numpy_helper.from_array(np.array([16, 3, 3, 3], np.int64), "w_shape")
    stored = numpy_helper.from_array(np.ones((16, 8), np.float32), "stored_w")
    fill = helper.make_tensor("fill", TensorProto.FLOAT, [1], [0.01])
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=fill, name="make_w"),
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("ReduceMean", ["c"], ["m"], axes=[2, 3], keepdims=0, name="pool"),
        helper.make_node("MatMul", ["m", "stored_w"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        [shape, stored],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def test_weights_the_graph_computes_are_not_streamed_and_say_so(tmp_path):
    """Streaming reads each weight from where it is stored; a weight made by the graph
    (light_vgg19 of ONNX's test data makes all of them) was quantized by ModelOpt and
    silently skipped by the streamed plan ("no GEMM of the model can be quantized")."""
    from pipeline.precision.common import streamed

    path = computed_weight_model(tmp_path / "computed.onnx")
    model = onnx.load(path)
    assert [n.name for n in streamed.computed_weights(model)] == ["conv"]

    def calibrated(*overrides):
        cfg = compose(
            "model=onnx_file",
            f"model.onnx_path={path}",
            f"model.source={path}",
            "profile.shapes={x: [1x3x16x16, 2x3x16x16, 2x3x16x16]}",
            "precision=int8",
            "calibration=random",
            "calibration.num_samples=4",
            f"calibration.cache_dir={tmp_path / 'cache'}",
            *overrides,
        )
        layout = Layout(tmp_path / "run")
        stages.export(cfg, layout)
        return stages.calibrate(cfg, layout)

    with pytest.raises(PipelineError, match=r"cannot stream GEMM weights the graph computes"):
        calibrated("calibration.streaming=always")
    summary = calibrated()  # auto: ModelOpt, which folds the weight and quantizes the Conv
    assert summary["calibration"]["calibrated_by"] == "modelopt"
    assert summary["calibration"]["gemm_flops"]["quantized_fraction"] > 0.5


@pytest.fixture(scope="module")
def external_export(tmp_path_factory):
    """outlier_bert exported with its weights in an external-data file, as a model past
    the inline limit (256 MiB) is."""
    mp = pytest.MonkeyPatch()
    mp.setenv(onnx_model.INLINE_LIMIT_ENV, "1024")
    try:
        layout = Layout(tmp_path_factory.mktemp("external_export"))
        stages.export(compose("model=outlier_bert"), layout)
    finally:
        mp.undo()
    return layout


@pytest.mark.parametrize("precision", ["int8", "int4_rtn", "int4_awq", "fp16"])
def test_a_model_with_external_data_streams_by_default(external_export, tmp_path, precision):
    src = external_export.export_dir / "model.onnx"
    assert any(
        t.data_location == onnx.TensorProto.EXTERNAL
        for t in onnx_model.load(src, check=False, weights=False).graph.initializer
    )
    cfg = compose(
        "model=outlier_bert",
        f"precision={precision}",
        # the search's one session reads the external weights too
        *(["precision.fallback=auto"] if precision != "fp16" else []),
        "calibration.method=max",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = fresh(external_export, tmp_path)
    summary = stages.calibrate(cfg, layout)
    record = summary["autocast" if precision == "fp16" else "calibration"]
    assert record["calibrated_by"].startswith("streamed")
    assert summary["gate_passed"], summary["gate"]
    again = stages.calibrate(cfg, fresh(external_export, tmp_path / "again"))
    assert again["autocast" if precision == "fp16" else "calibration"]["cache"]["hit"]
    recorded = json.loads((layout.calibrate_dir / "calibration.json").read_text())
    key = "autocast" if precision == "fp16" else "calibration"
    assert recorded[key]["calibrated_by"] == record["calibrated_by"]


def test_smoothquant_streams_a_model_with_external_data_too(external_export, tmp_path):
    """SmoothQuant reads the weights into memory to rescale them; the file's layout, not
    that copy, decides (a smoothed 135M decoder went through ModelOpt at 15x its bytes)."""
    cfg = compose(
        "model=outlier_bert",
        "precision=int8",
        "precision.smoothing=smoothquant",
        "calibration.method=max",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    summary = stages.calibrate(cfg, fresh(external_export, tmp_path))
    assert summary["calibration"]["calibrated_by"].startswith("streamed")
    assert summary["calibration"]["smoothing"]["groups"]
    assert summary["gate_passed"], summary["gate"]


def test_smoothquant_holds_no_weights_of_a_model_with_external_data(external_export, tmp_path):
    """The smoothed tensors go to a scratch data file with the source's weights, which
    every graph of the search names: none holds weight bytes in memory, the switchboard
    still runs what the written graph runs, and the scratch folder goes with the graphs."""
    import gc

    from pipeline.precision.common.ops import read_names

    _, result = quantized(
        external_export, tmp_path, "model=outlier_bert", "precision=int8",
        "precision.smoothing=smoothquant", "calibration.method=max",
    )  # fmt: skip
    graphs = result.graphs
    assert graphs.smooth and graphs.made
    scratch = graphs.base_dir
    assert scratch is not None and scratch != external_export.export_dir
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in graphs.made.values())
    exported = onnx_model.load(external_export.export_dir / "model.onnx", weights=False)
    weights = {t.name for t in exported.graph.initializer if t.HasField("data_location")}
    assert len(weights) > 10
    weights |= set(graphs.made)
    for model in (graphs.source, graphs.graph(), graphs.smoothed()):
        held = {t.name for t in model.graph.initializer if t.HasField("raw_data")}
        assert not held & weights, sorted(held & weights)[:5]
    # a source weight the smoothing replaced is not written beside its smoothed copy
    written = onnx_model.load(tmp_path / "qdq.onnx", check=False, weights=False)
    assert {t.name for t in written.graph.initializer} <= read_names(written)
    feeds = [p[0] for p in reference_pairs(external_export)]
    board = graphs.switchboard(feeds)
    candidates = graphs.plan.candidates()
    for keep in ([], candidates[::2]):
        for a, b in zip(board.outputs(keep), graphs.run(graphs.graph(keep), feeds)):
            np.testing.assert_array_equal(a["embedding"], b["embedding"])
    del board, graphs, result
    gc.collect()
    assert not scratch.exists()


def test_a_weight_past_2_gb_is_refused_before_modelopt_loads_anything(tmp_path):
    """The check reads dims only: the 2.1 GB weight's file need not exist."""
    from onnx import TensorProto, helper

    from pipeline.precision.common import streamed

    big = helper.make_tensor("w", TensorProto.FLOAT, [2**19 + 1, 1024], [])
    big.data_location = TensorProto.EXTERNAL
    big.external_data.add(key="location", value="w.bin")
    graph = helper.make_graph([], "g", [], [], [big])
    with pytest.raises(PipelineError, match=r"weight 'w' is 2\.15 GB: int8 calibration through"):
        streamed.refuse_huge_tensors(helper.make_model(graph), "int8 calibration")
    graph.initializer[0].dims[0] = 2**19 - 1  # 4 KiB under 2 GiB: taken
    streamed.refuse_huge_tensors(helper.make_model(graph), "int8 calibration")


@pytest.mark.parametrize("shape", [(3, 5), (4, 4), (1, 1)])
def test_int4_packing_is_onnxs(shape):
    from onnx import TensorProto, helper

    from pipeline.precision.int4.rtn import packed_int4

    q = np.random.default_rng(0).integers(-8, 8, size=shape).astype(np.int8)
    ours = helper.make_tensor("q", TensorProto.INT4, shape, packed_int4(q), raw=True)
    theirs = helper.make_tensor("q", TensorProto.INT4, shape, q.ravel())
    np.testing.assert_array_equal(numpy_helper.to_array(ours), numpy_helper.to_array(theirs))
    np.testing.assert_array_equal(numpy_helper.to_array(ours).astype(np.int8), q)


def test_precision_auto_on_a_model_with_external_data_streams_its_types(external_export, tmp_path):
    """Each type streamed (int4_rtn, int8 by max), the switchboard's variants kept narrow
    (fp8 among them: its QuantizeLinear output comes back from ONNX Runtime as bytes)."""
    cfg = compose(
        "model=outlier_bert",
        "precision=auto",
        "precision.objective=weight_bytes",
        "precision.search_types=[int4,int8,fp8,fp16]",
        "precision.int4_method=rtn_dq",
        "calibration.method=max",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    summary = stages.calibrate(cfg, fresh(external_export, tmp_path))
    assert summary["gate_passed"], summary["gate"]
    types = summary["calibration"]["types"]
    assert set(types) == {"int4", "int8", "fp8"}
    assert all(t["calibrated_by"].startswith("streamed") for t in types.values())
    assert sum(n for t, n in summary["mixed"]["counts"].items() if t != "fp32") > 0


def test_auto_leaves_out_a_type_that_quantizes_nothing_when_streamed_too(tmp_path, monkeypatch):
    """A model of GEMVs (one sample a batch) kept in external data, so each type streams:
    int8 has nothing to quantize (ModelOpt's rule for TensorRT's kernels), and
    precision=auto leaves it out with a line and searches the rest, as it does where
    ModelOpt calibrates the model."""
    from tests.precision.test_objective import WIDE, wide_mlp

    inline = wide_mlp(tmp_path / "inline.onnx", hidden=256, ffn=512)
    model = tmp_path / "model" / "wide.onnx"
    model.parent.mkdir()
    onnx.save(onnx.load(inline), model, save_as_external_data=True, location="wide.data")
    monkeypatch.setenv(onnx_model.INLINE_LIMIT_ENV, "1024")
    cfg = compose(
        *WIDE,
        f"model.onnx_path={model}",
        f"model.source={model.parent}",
        "profile.shapes={x: [1x256, 8x256, 16x256]}",
        "precision.search_types=[int4,int8,fp16]",
        "precision.objective=weight_bytes",
        "build.reference_engines=never",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = Layout(tmp_path / "run")
    stages.fingerprint(cfg, layout)
    stages.export(cfg, layout)
    summary = stages.calibrate(cfg, layout)
    assert summary["gate_passed"], summary["gate"]
    assert "no GEMM of the model can be quantized to int8" in summary["mixed"]["left_out"]["int8"]
    assert summary["calibration"]["types"]["int4"]["calibrated_by"].startswith("streamed")
