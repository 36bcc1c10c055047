"""precision.fallback=auto on the outlier transformer (models/outlier_transformer.py): real
ModelOpt int8 PTQ, real ONNX Runtime sensitivity runs, a real TensorRT-RTX build of the
mixed graph; and the gate's metrics file when it fails."""

import shutil
import time

import numpy as np
import onnx
import pytest

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import steps
from pipeline.precision import accuracy, fallback
from pipeline.report import precision_view
from pipeline.report import report as report_lib
from tests.conftest import compose

MODEL = ("model=outlier_transformer", "precision=int8")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    layout = Layout(tmp_path_factory.mktemp("outlier_export"))
    steps.export(compose(*MODEL), layout)
    return layout


def fresh(exported, tmp_path):
    layout = Layout(tmp_path / "run")
    shutil.copytree(exported.export_dir, layout.export_dir)
    return layout


@pytest.fixture(scope="module")
def searched(exported, tmp_path_factory):
    """int8 with fallback=auto, cold and then again (a cache hit)."""
    tmp = tmp_path_factory.mktemp("outlier_fallback")
    layout = fresh(exported, tmp)
    cfg = compose(*MODEL, "precision.fallback=auto", f"calibration.cache_dir={tmp / 'cache'}")
    cold = steps.calibrate(cfg, layout)
    cold_bytes = (layout.calibrate_dir / "model.onnx").read_bytes()
    started = time.perf_counter()
    warm = steps.calibrate(cfg, layout)
    return cfg, layout, cold, warm, cold_bytes, time.perf_counter() - started


def test_plain_int8_misses_the_gate_naming_every_failing_metric_and_writes_them_all(
    exported, tmp_path
):
    layout = fresh(exported, tmp_path)
    cfg = compose(*MODEL, f"calibration.cache_dir={tmp_path / 'cache'}")
    with pytest.raises(PipelineError) as failed:
        steps.calibrate(cfg, layout)
    line = str(failed.value)
    assert "\n" not in line and "more)" not in line
    assert "cosine of output 'embedding' is" in line and "needs >= 0.999" in line
    assert "max_abs_error of output 'embedding' is" in line and "needs <= 0.05" in line
    metrics = fileio.read_json(layout.metrics_dir / "accuracy.json")
    assert metrics["gate_passed"] is False
    assert metrics["gate"]["embedding"]["cosine"]["passed"] is False
    assert metrics["gate"]["embedding"]["cosine"]["value"] < 0.99
    assert {r["metric"] for r in metrics["failing"]} == {"cosine", "max_abs_error"}
    # every metric, the embedding's per-row figures included, and no top-1 for an embedding
    figures = metrics["accuracy"]["embedding"]
    assert {"max_abs_error", "mean_rel_error", "cosine", "cosine_mean", "rows"} <= set(figures)
    assert "top1_agreement" not in figures and figures["cosine"] <= figures["cosine_mean"]
    assert not layout.calibrate_dir.exists()


def test_fallback_passes_keeping_at_least_half_the_matmuls_in_int8(searched):
    _, layout, cold, _, _, _ = searched
    fb = cold["fallback"]
    assert cold["gate_passed"] and fb["needed"] and fb["cache"]["hit"] is False
    assert fb["plain"]["score"] > 1 and fb["plain"]["failing"]
    assert len(fb["kept_fp32"]) > 0 and 2 * fb["matmuls_still_quantized"] >= fb["quantized_matmuls"]
    # ranked most sensitive first; the kept nodes are the head of that ranking, in order
    ranked = [r["node"] for r in fb["sensitivity"]]
    assert [r["sensitivity"] for r in fb["sensitivity"]] == sorted(
        (r["sensitivity"] for r in fb["sensitivity"]), reverse=True
    )
    greedy = [s["added"] for s in fb["steps"]]
    assert greedy == ranked[: len(greedy)]
    assert set(fb["kept_sensitivity"]) == set(fb["kept_fp32"])
    # one step per node kept in turn, each with its metrics; only the last passes
    assert [s["kept"] for s in fb["steps"]] == list(range(1, len(greedy) + 1))
    assert [s["passed"] for s in fb["steps"]] == [False] * (len(greedy) - 1) + [True]
    assert all("cosine" in s["metrics"]["embedding"] for s in fb["steps"])
    # then each but the last is tried quantized again; those that pass leave the kept set
    assert [p["node"] for p in fb["prune"]] == greedy[-2::-1]
    assert fb["kept_fp32"] == [
        n for n in greedy if n not in {p["node"] for p in fb["prune"] if p["requantized"]}
    ]
    # the outlier projections are among the kept ones
    assert any("ff2" in n for n in fb["kept_fp32"])
    # the written graph: kept nodes read no DequantizeLinear, the others still do
    model = onnx.load(layout.calibrate_dir / "model.onnx")
    producer = {o: n.op_type for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm"):
            quantized = any(producer.get(i) == "DequantizeLinear" for i in node.input)
            assert quantized == (node.name not in fb["kept_fp32"]), node.name
    assert (
        fileio.read_json(layout.calibrate_dir / "calibration.json")["fallback"]["kept_fp32"]
        == fb["kept_fp32"]
    )
    metrics = fileio.read_json(layout.metrics_dir / "accuracy.json")
    assert metrics["gate_passed"] and metrics["fallback"]["kept_fp32"] == fb["kept_fp32"]


def test_rerun_is_a_cache_hit_under_two_seconds(searched):
    _, layout, cold, warm, cold_bytes, seconds = searched
    assert (
        warm["fallback"]["cache"]["hit"] is True
        and warm["fallback"]["cache"]["key"] == cold["fallback"]["cache"]["key"]
    )
    assert warm["calibration"]["cache"]["hit"] is True
    assert (layout.calibrate_dir / "model.onnx").read_bytes() == cold_bytes
    assert seconds < 2.0


def test_mixed_graph_builds_with_tensorrt_rtx(searched):
    from pipeline.engine import build

    cfg, layout, _, _, _, _ = searched
    onnx_path = layout.calibrate_dir / "model.onnx"
    result = build.build_engine(
        onnx_path,
        cfg.precision,
        cfg.build,
        build.resolve_profiles(cfg.profile, onnx_path),
        "tensorrt_rtx",
        progress=False,
    )
    assert len(result.engine) > 10_000


def test_report_shows_the_sensitivity_table_and_marks_kept_nodes(searched):
    _, layout, cold, _, _, _ = searched
    t = precision_view.precision_transform(
        fileio.read_json(layout.calibrate_dir / "calibration.json")
    )
    md = "\n".join(report_lib._transform_markdown(t))
    assert "sensitivity (gate score added when quantized alone)" in md
    assert all(n in md for n in cold["fallback"]["kept_fp32"])
    kept = cold["fallback"]["kept_fp32"][0]
    report = {
        "precision_transform": t,
        "graph": {"nodes": [{"name": kept}, {"name": "other"}], "details": []},
    }
    precision_view.mark_kept_nodes(report)
    assert [n.get("marked") for n in report["graph"]["nodes"]] == [True, None]


def test_even_all_high_precision_failing_is_one_clear_error(exported, tmp_path):
    layout = fresh(exported, tmp_path)
    cfg = compose(
        *MODEL,
        "precision.fallback=auto",
        "precision.gate.max_abs_error=1e-9",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    with pytest.raises(
        PipelineError,
        match=r"even with all 13 quantized nodes kept in fp32 the graph misses the "
        r"gate \(max_abs_error of output 'embedding' is",
    ):
        steps.calibrate(cfg, layout)
    assert not layout.calibrate_dir.exists()
    # the plain graph's metrics are written all the same, with what the search found
    metrics = fileio.read_json(layout.metrics_dir / "accuracy.json")
    assert (
        metrics["gate_passed"] is False
        and metrics["gate"]["embedding"]["max_abs_error"]["passed"] is False
    )
    assert (
        metrics["fallback"]["needed"] is True and "even with all 13" in metrics["fallback"]["error"]
    )


def test_fallback_is_refused_where_nothing_is_quantized():
    with pytest.raises(
        PipelineError, match="precision.fallback=auto with precision=fp16: it has no quantized"
    ):
        compose("precision=fp16", "precision.fallback=auto")


def test_without_qdq_keeps_other_nodes_scales(searched):
    _, layout, cold, _, _, _ = searched
    model = onnx.load(layout.calibrate_dir / "model.onnx")
    names = [n.name for n in fallback.quantized_nodes(model)]
    assert len(names) == cold["fallback"]["matmuls_still_quantized"]
    plain = fallback.without_qdq(model, set())
    assert plain.SerializeToString() == model.SerializeToString()
    everything = fallback.without_qdq(model, set(names))
    assert fallback.quantized_nodes(everything) == []


def test_embedding_compares_cosine_per_row():
    ref = [{"e": np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)}]
    got = [{"e": np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)}]
    m = accuracy.compare(ref, got, "embedding")["e"]
    assert m["cosine"] == pytest.approx(2**-0.5) and m["cosine_mean"] == pytest.approx(
        (1 + 2**-0.5) / 2
    )
    assert "top1_agreement" not in m and m["rows"] == 2
    assert "top1_agreement" in accuracy.compare(ref, got, "classification")["e"]


def test_fallback_not_needed_leaves_the_plain_graph(exported, tmp_path):
    layout = fresh(exported, tmp_path)
    loose = ("precision.gate.min_cosine=0.9", "precision.gate.max_abs_error=1.0")
    plain = steps.calibrate(
        compose(*MODEL, *loose, f"calibration.cache_dir={tmp_path / 'cache'}"), layout
    )
    plain_bytes = (layout.calibrate_dir / "model.onnx").read_bytes()
    auto = steps.calibrate(
        compose(
            *MODEL, *loose, "precision.fallback=auto", f"calibration.cache_dir={tmp_path / 'cache'}"
        ),
        layout,
    )
    assert auto["fallback"]["needed"] is False and auto["accuracy"] == plain["accuracy"]
    assert (layout.calibrate_dir / "model.onnx").read_bytes() == plain_bytes


def test_fp8_search_keeps_what_its_gate_needs(exported, tmp_path):
    """fp8 Q/DQ (ModelOpt, float8 e4m3): a gate between the plain graph and the all-fp32 one."""
    layout = fresh(exported, tmp_path)
    cfg = compose(
        "model=outlier_transformer",
        "precision=fp8",
        "precision.fallback=auto",
        "precision.gate.min_cosine=0.9985",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    summary = steps.calibrate(cfg, layout)
    fb = summary["fallback"]
    assert (
        fb["needed"]
        and summary["gate_passed"]
        and fb["plain"]["metrics"]["embedding"]["cosine"] < 0.9985
    )
    assert 1 <= len(fb["kept_fp32"]) < fb["quantized_matmuls"] // 2
