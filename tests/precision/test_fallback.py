"""precision.fallback=auto on the BERT-shaped outlier model (pipeline/zoo/outlier_bert.py): real
ModelOpt int8 PTQ, real ONNX Runtime search runs, a real TensorRT-RTX build of the mixed
graph; and the gate's metrics file when it fails."""

import time

import numpy as np
import onnx
import pytest
from omegaconf import OmegaConf

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.flow import stages
from pipeline.precision.common import ops, search_progress
from pipeline.precision.fallback import search
from pipeline.precision.fallback.written import resume
from pipeline.precision.gate import accuracy
from pipeline.precision.gate.tasks import OutputTasks
from pipeline.precision.qdq import plan
from pipeline.report.inspect import precision_view
from tests.conftest import compose
from tests.helpers import fresh, quantized, reference_pairs

MODEL = ("model=outlier_bert", "precision=int8")


@pytest.fixture(scope="module")
def searched(bert_export, tmp_path_factory):
    """int8 with fallback=auto, cold and then again (a cache hit)."""
    tmp = tmp_path_factory.mktemp("bert_fallback")
    layout = fresh(bert_export, tmp)
    cfg = compose(*MODEL, "precision.fallback=auto", f"calibration.cache_dir={tmp / 'cache'}")
    cold = stages.calibrate(cfg, layout)
    cold_bytes = (layout.calibrate_dir / "model.onnx").read_bytes()
    started = time.perf_counter()
    warm = stages.calibrate(cfg, layout)
    return cfg, layout, cold, warm, cold_bytes, time.perf_counter() - started


def test_plain_int8_misses_the_gate_naming_every_failing_metric_and_writes_them_all(
    bert_export, tmp_path
):
    layout = fresh(bert_export, tmp_path)
    cfg = compose(*MODEL, f"calibration.cache_dir={tmp_path / 'cache'}")
    with pytest.raises(PipelineError) as failed:
        stages.calibrate(cfg, layout)
    line = str(failed.value)
    assert "\n" not in line and "more)" not in line
    assert "cosine of output 'embedding' (embedding) is" in line and "needs >= 0.999" in line
    assert "max_abs_error of output 'embedding' (embedding) is" in line and "needs <= 0.05" in line
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


def test_fallback_passes_keeping_at_least_three_quarters_of_the_matmuls_in_int8(searched):
    _, layout, cold, _, _, _ = searched
    fb = cold["fallback"]
    assert cold["gate_passed"] and fb["needed"] and fb["cache"]["hit"] is False
    assert fb["plain"]["score"] > 1 and fb["plain"]["failing"]
    assert fb["placement"] == "gemm_inputs"
    assert len(fb["kept"]) > 0 and fb["matmuls_still_quantized"] >= 0.75 * fb["quantized_matmuls"]
    # groups first: every group measured quantized alone; the kept groups are the most
    # sensitive ones, and the kept nodes come from them only
    groups = fb["groups"]
    assert len(groups) < fb["quantized_nodes"]
    by_score = sorted(groups, key=lambda g: -g["score_quantized_alone"])
    n_kept = sum(g["kept"] for g in groups)
    assert {g["group"] for g in by_score[:n_kept]} == {g["group"] for g in groups if g["kept"]}
    pool = {n for g in groups if g["kept"] for n in g["nodes"]}
    assert set(fb["kept"]) <= pool and {r["node"] for r in fb["nodes"]} == pool
    # then nodes of the kept groups, most sensitive first: the kept ones head that ranking
    ranked = [r["node"] for r in fb["nodes"]]
    assert ranked[: len(fb["kept"])] == fb["kept"]
    scores = [r["score_quantized_alone"] for r in fb["nodes"]]
    assert scores == sorted(scores, reverse=True)
    # fewer graphs than measuring every node alone, and every step recorded with metrics
    assert fb["graphs_evaluated"] < fb["quantized_nodes"]
    search_stages = [s["stage"] for s in fb["steps"]]
    assert search_stages.count("group quantized alone") == len(groups)
    assert fb["graphs_evaluated"] == len(fb["steps"]) + 1  # + the graph with all kept
    assert all("cosine" in s["metrics"]["embedding"] for s in fb["steps"])
    # the FFN output projection reads the FFN's outlier units: it is what must stay out of
    # int8; kept nodes go to fp16 where the gate holds (the next type down), else fp32
    assert all("ff2" in n for n in fb["kept"])
    assert sorted(fb["kept_fp16"] + fb["kept_fp32"]) == sorted(fb["kept"])
    assert fb["fp16_checks"][0] == {
        "kept_fp32": 0,
        "kept_fp16": len(fb["kept"]),
        "passed": not fb["kept_fp32"],
    }
    # the written graph: kept nodes read no DequantizeLinear, the other GEMMs still do
    model = onnx.load(layout.calibrate_dir / "model.onnx")
    producer = {o: n.op_type for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm"):
            quantized_in = any(producer.get(i) == "DequantizeLinear" for i in node.input)
            assert quantized_in == (node.name not in fb["kept"]), node.name
            half = any(i.endswith(f"::fp16::{node.name}") for i in node.input)
            assert half == (node.name in fb["kept_fp16"]), node.name
    calibration = fileio.read_json(layout.calibrate_dir / "calibration.json")
    assert calibration["fallback"]["kept"] == fb["kept"]
    flops = calibration["calibration"]["gemm_flops"]
    assert 0.5 < flops["quantized_fraction"] < 1.0 and not flops["nodes_of_unknown_shape"]
    metrics = fileio.read_json(layout.metrics_dir / "accuracy.json")
    assert metrics["gate_passed"] and metrics["fallback"]["kept_fp16"] == fb["kept_fp16"]


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


def test_report_shows_groups_nodes_tensors_and_marks_kept_nodes(searched):
    _, layout, cold, _, _, _ = searched
    t = precision_view.precision_transform(
        fileio.read_json(layout.calibrate_dir / "calibration.json")
    )
    md = "\n".join(precision_view.transform_markdown(t))
    assert "group (one role in every layer)" in md and "node (in the kept groups)" in md
    assert f"({cold['fallback']['graphs_evaluated']} graphs evaluated)" in md
    assert all(n in md for n in cold["fallback"]["kept"])
    assert "placement: gemm_inputs" in md and "of GEMM FLOPs run in int8" in md
    assert "read unquantized by" in md and "/layers.0/Add" in md  # the residual Add
    kept = cold["fallback"]["kept"][0]
    report = {
        "precision_transform": t,
        "graph": {"nodes": [{"name": kept}, {"name": "other"}], "details": []},
    }
    precision_view.mark_kept_nodes(report)
    assert [n.get("marked") for n in report["graph"]["nodes"]] == [True, None]


def test_a_gate_the_fp32_graph_cannot_meet_is_one_clear_error(bert_export, tmp_path):
    """Keeping every node is the fp32 graph: only an unreachable gate stops the search."""
    cfg, result = quantized(bert_export, tmp_path, *MODEL)
    gate = OmegaConf.create({**OmegaConf.to_container(cfg.precision.gate), "min_cosine": 1.5})
    pairs = reference_pairs(bert_export)
    with pytest.raises(search.SearchFailed, match=r"even with all 17 quantized nodes kept in fp32"):
        search.search(
            result.graphs,
            pairs,
            accuracy.Criteria(gate, OutputTasks("embedding")),
            {"score": 2, "metrics": {}, "failing": []},
        )


def test_a_gate_only_the_fp32_graph_meets_keeps_every_node_and_is_exact(bert_export, tmp_path):
    layout = fresh(bert_export, tmp_path)
    cfg = compose(
        *MODEL,
        "precision.fallback=auto",
        "precision.gate.min_cosine=0.9999999",
        "precision.gate.max_abs_error=0",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    summary = stages.calibrate(cfg, layout)
    fb = summary["fallback"]
    assert summary["gate_passed"] and len(fb["kept_fp32"]) == fb["quantized_nodes"]
    assert not fb["kept_fp16"]  # fp16 is not exact: every kept node stays in fp32
    assert summary["accuracy"]["embedding"]["max_abs_error"] == 0.0
    ops = onnx_model_ops(layout.calibrate_dir / "model.onnx")
    assert "QuantizeLinear" not in ops and "DequantizeLinear" not in ops


def onnx_model_ops(path) -> set[str]:
    return {n.op_type for n in onnx.load(path).graph.node}


def test_fallback_is_refused_where_nothing_is_quantized():
    with pytest.raises(
        PipelineError, match="precision.fallback=auto with precision=fp16: it has no quantized"
    ):
        compose("precision=fp16", "precision.fallback=auto")


def test_the_search_graph_for_each_kept_set_changes_only_those_nodes(bert_export, tmp_path):
    _, result = quantized(bert_export, tmp_path, *MODEL)
    graphs = result.graphs
    candidates = graphs.plan.candidates()
    plain, one = graphs.graph(), graphs.graph(candidates[:1])
    assert plain.SerializeToString() == result.graphs.graph().SerializeToString()
    readers = {n.name for n in one.graph.node for x in n.input if x.endswith("_dq")}
    assert candidates[0] not in readers and set(candidates[1:]) <= readers
    assert len(plan.quantized_tensors(one)) <= len(plan.quantized_tensors(plain))


def test_embedding_compares_cosine_per_row():
    ref = [{"e": np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)}]
    got = [{"e": np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)}]
    m = accuracy.compare(ref, got, "embedding")["e"]
    assert m["cosine"] == pytest.approx(2**-0.5) and m["cosine_mean"] == pytest.approx(
        (1 + 2**-0.5) / 2
    )
    assert "top1_agreement" not in m and m["rows"] == 2
    assert "top1_agreement" in accuracy.compare(ref, got, "classification")["e"]


def test_fallback_not_needed_leaves_the_plain_graph(bert_export, tmp_path):
    layout = fresh(bert_export, tmp_path)
    loose = ("precision.gate.min_cosine=0.9", "precision.gate.max_abs_error=1.0")
    plain = stages.calibrate(
        compose(*MODEL, *loose, f"calibration.cache_dir={tmp_path / 'cache'}"), layout
    )
    plain_bytes = (layout.calibrate_dir / "model.onnx").read_bytes()
    auto = stages.calibrate(
        compose(
            *MODEL, *loose, "precision.fallback=auto", f"calibration.cache_dir={tmp_path / 'cache'}"
        ),
        layout,
    )
    assert auto["fallback"]["needed"] is False and auto["accuracy"] == plain["accuracy"]
    assert (layout.calibrate_dir / "model.onnx").read_bytes() == plain_bytes


def test_fp8_search_keeps_what_its_gate_needs(bert_export, tmp_path):
    """fp8 Q/DQ (ModelOpt, float8 e4m3) the same way: placement, exact fallback, search."""
    layout = fresh(bert_export, tmp_path)
    cfg = compose(
        "model=outlier_bert",
        "precision=fp8",
        "precision.fallback=auto",
        "precision.gate.min_cosine=0.9995",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    summary = stages.calibrate(cfg, layout)
    fb = summary["fallback"]
    assert fb["needed"] and summary["gate_passed"]
    assert fb["plain"]["metrics"]["embedding"]["cosine"] < 0.9995
    assert 1 <= len(fb["kept"]) < fb["quantized_matmuls"] // 2
    assert summary["calibration"]["quantize_mode"] == "fp8"


def test_outliers_in_matmul_inputs_are_found_too(tmp_path):
    """pipeline/zoo/outlier_transformer.py: its outliers are in the inputs of two projections."""
    layout = fresh(_outlier_transformer_export(tmp_path), tmp_path)
    cfg = compose(
        "model=outlier_transformer",
        "precision=int8",
        "precision.fallback=auto",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    fb = stages.calibrate(cfg, layout)["fallback"]
    assert fb["needed"] and 2 * fb["matmuls_still_quantized"] >= fb["quantized_matmuls"]


def _outlier_transformer_export(tmp_path):
    from pipeline.core.layout import Layout

    layout = Layout(tmp_path / "export")
    stages.export(compose("model=outlier_transformer"), layout)
    return layout


def test_search_progress_counts_every_graph_and_shows_the_cheapest_that_passed():
    progress = search_progress.Progress("fallback search", 4, len, lambda k: f"{k:.0f} kept")
    progress.judged(["a", "b"], {"passed": True})
    progress.judged(["a"], {"passed": False})
    progress.judged(["a", "b", "c"], {"passed": True})
    assert progress.bar.n == 3 and progress.best == 2
    progress.close()
    assert search_progress.most_graphs(3, 10) == 1 + 3 + 2 + 10 + 4


def test_a_choice_that_misses_the_gate_as_written_resumes_with_written_graphs(
    bert_export, tmp_path
):
    """The written graph has the last word: where it is judged worse than the search's
    emulation (here the written graphs are judged under a stricter gate than the search's,
    as a layout detector's written graph measured 0.0568 where its search step measured
    0.0466), more nodes are kept, most sensitive first, each count judged as written,
    until the fewest that pass."""
    cfg, result = quantized(bert_export, tmp_path, *MODEL)
    pairs = reference_pairs(bert_export)
    base = OmegaConf.to_container(cfg.precision.gate)
    loose = accuracy.Criteria(OmegaConf.create(base), OutputTasks("embedding"))
    strict = accuracy.Criteria(
        OmegaConf.create({**base, "min_cosine": 0.99995}), OutputTasks("embedding")
    )
    plain = {"score": 2, "metrics": {}, "failing": []}
    record = search.search(result.graphs, pairs, loose, plain)
    searched = list(record["kept"])

    def written(keep):
        got = result.graphs.run(result.graphs.graph(keep), [p[0] for p in pairs])
        _, gate = strict.judge([p[1] for p in pairs], got)
        return {"gate": gate, "gate_passed": accuracy.passed(gate), "kept": len(keep)}

    assert not written(searched)["gate_passed"]
    final = resume(result.graphs, record, written)
    kept = record["kept"]
    assert final["gate_passed"] and final["kept"] == len(kept) > len(searched)
    assert kept[: len(searched)] == searched
    checks = record["written_checks"]
    assert checks[-1]["passed"] or any(c["kept"] == len(kept) and c["passed"] for c in checks)
    # the fewest: one node fewer, judged as written, fails
    assert not written(kept[:-1])["gate_passed"]
    plan = result.graphs.plan
    gemms_kept = sum(1 for n in kept if plan.op_types[n] in ops.GEMMS)
    assert record["gemms_still_quantized"] == record["quantized_gemms"] - gemms_kept


def test_fallback_fp32_keeps_every_kept_node_in_fp32_and_auto_takes_fp16_where_it_holds(
    searched, bert_export, tmp_path
):
    """precision.fallback=fp32 is the search alone (every kept node in fp32); auto then
    moves the kept nodes to fp16 where the gate holds, the next type down from int8."""
    _, searched_layout, cold, _, _, _ = searched
    auto = cold["fallback"]
    # a weight every reader takes in fp16 is written once, in fp16: no fp32 copy left unread
    written = onnx.load(searched_layout.calibrate_dir / "model.onnx", load_external_data=False)
    unread = {i.name for i in written.graph.initializer} - ops.read_names(written)
    assert not unread, sorted(unread)[:5]
    layout = fresh(bert_export, tmp_path)
    cfg = compose(*MODEL, "precision.fallback=fp32", f"calibration.cache_dir={tmp_path / 'c'}")
    fb = stages.calibrate(cfg, layout)["fallback"]
    assert fb["kept_fp32"] == fb["kept"] == auto["kept"] and not fb["kept_fp16"]
    assert "fp16_checks" not in fb
    assert auto["kept_fp16"], auto["fp16_checks"]  # fp16 holds for the FFN outputs here
    graph = onnx.load(layout.calibrate_dir / "model.onnx")
    halves = {i.name for i in graph.graph.initializer if i.data_type == onnx.TensorProto.FLOAT16}
    assert not [h for h in halves for n in fb["kept"] if h.endswith(f"::fp16::{n}")]


def test_many_nodes_in_the_kept_groups_are_ranked_a_layer_at_a_time(
    bert_export, tmp_path, monkeypatch
):
    """A decoder's kept roles hold a node per layer each (90 on a 30-layer model): past
    BLOCKS_PAST the search ranks the layers' blocks first, and past NODE_LIMIT in the kept
    blocks it keeps those blocks whole. The limits are lowered here so that the bundled
    model takes that path: the choice passes, and what is kept is whole layers' nodes."""
    monkeypatch.setattr(search, "BLOCKS_PAST", 1)
    monkeypatch.setattr(search, "NODE_LIMIT", 0)
    cfg = compose(*MODEL, "precision.fallback=auto", f"calibration.cache_dir={tmp_path / 'c'}")
    summary = stages.calibrate(cfg, fresh(bert_export, tmp_path))
    fb = summary["fallback"]
    assert summary["gate_passed"] and fb["needed"] and fb["blocks"]
    kept_blocks = [b for b in fb["blocks"] if b["kept"]]
    by_score = sorted(fb["blocks"], key=lambda b: -b["score_quantized_alone"])
    assert [b["group"] for b in by_score[: len(kept_blocks)]] == [b["group"] for b in kept_blocks]
    assert set(fb["kept"]) == {n for b in kept_blocks for n in b["nodes"]}
    assert fb["nodes"] == [] and any(s["stage"] == "blocks kept" for s in fb["steps"])


def test_a_node_quantized_alone_from_a_checkpoint_is_the_whole_graphs_run(bert_export, tmp_path):
    """The fallback's units quantized alone run from the latest checkpoint before their
    first node (common/checkpoints.py): the whole graph's outputs to float rounding."""
    _, result = quantized(bert_export, tmp_path, *MODEL)
    candidates = result.graphs.plan.candidates()
    feeds = [p[0] for p in reference_pairs(bert_export)]
    board = result.graphs.switchboard(feeds)
    assert board.resume is not None  # a graph held in memory
    which = [0]
    keeps = [[c for c in candidates if c != node] for node in candidates]
    whole = [board.outputs(keep, which) for keep in keeps]
    with board.checkpointed(which, expected_s=3600.0):
        opened = board.resume.open
        assert opened is not None
        on = [{f: n not in keep for n, f in board.flags.items()} for keep in keeps]
        assert sum(opened.outputs(o, which) is not None for o in on) > len(keeps) // 2
        for keep, want in zip(keeps, whole, strict=True):
            for got_b, want_b in zip(board.outputs(keep, which), want, strict=True):
                for name in want_b:
                    np.testing.assert_allclose(got_b[name], want_b[name], rtol=1e-5, atol=1e-6)
