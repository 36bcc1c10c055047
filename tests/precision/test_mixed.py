"""precision=auto on the bundled outlier transformer, for real: ModelOpt's int4 and int8
on the CPU, the search judged by ONNX Runtime, the chosen graph judged as written and
built by TensorRT-RTX."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.graph import onnx_runtime
from pipeline.precision.common import variants
from pipeline.precision.mixed import make
from pipeline.precision.mixed.graphs import _switchable
from tests.conftest import compose
from tests.helpers import fresh, reference_pairs

# A gate tight enough that no single low type passes on every GEMM (all int4 and all int8
# miss it), so the search has to mix.
# The mechanism under weight bytes: on a model this small the engine's fixed part outweighs
# its weights, and the default objective (engine_bytes) answers fp16 (tests/precision/
# test_objective.py).
TIGHT = (
    "model=outlier_transformer",
    "precision=auto",
    "precision.gate.min_cosine=0.998",
    "precision.objective=weight_bytes",
)


@pytest.fixture(scope="module")
def transformer_export(tmp_path_factory):
    layout = Layout(tmp_path_factory.mktemp("auto_export"))
    stages.export(compose(*TIGHT), layout)
    return layout


@pytest.fixture(scope="module")
def searched(transformer_export, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("auto")
    layout = fresh(transformer_export, tmp)
    cfg = compose(*TIGHT, f"calibration.cache_dir={tmp / 'cache'}", f"build.store_dir={tmp}")
    return cfg, layout, stages.calibrate(cfg, layout)


def test_auto_mixes_types_for_fewer_bytes_than_any_single_type_that_passes(searched):
    _, _, summary = searched
    record = summary["mixed"]
    assert summary["gate_passed"]
    singles = {g["graph"]: g for g in record["graphs"] if g["graph"].startswith("all ")}
    assert not singles["all int4"]["passed"] and not singles["all int8"]["passed"]
    best_single = min(g["weight_bytes"] for g in singles.values() if g["passed"])
    assert record["weight_bytes"] < 0.75 * best_single
    used = {t for t, n in record["counts"].items() if n}
    assert len(used) >= 2 and record["counts"]["fp32"] < record["candidates"]
    for row in record["assignment"]:
        assert row["type"] in row["sensitivity"] or row["type"] == "fp32"
        assert row["why"]
    # the front runs from fewest bytes to best score, the chosen graph on it
    front = record["pareto"]
    assert [p["weight_bytes"] for p in front] == sorted(p["weight_bytes"] for p in front)
    assert any(p["graph"] == "chosen" for p in front)


def test_the_written_graph_holds_the_types_chosen_and_builds(searched, monkeypatch, tmp_path):
    cfg, layout, summary = searched
    counts = summary["mixed"]["counts"]
    graph = onnx.load(str(layout.calibrate_dir / "model.onnx"))
    by_type = collections.Counter(i.data_type for i in graph.graph.initializer)
    assert by_type[onnx.TensorProto.INT4] == counts["int4"]
    fp16_gemms = [
        n for n in graph.graph.node if n.op_type in ("MatMul", "Gemm") and "::fp16" in n.input[0]
    ]
    assert len(fp16_gemms) == counts["fp16"]
    stages.fingerprint(cfg, layout)
    manifest = stages.build(cfg, layout, progress=False)
    assert manifest["engine"]["bytes"] > 0
    # the report shows each GEMM's type and why, every graph judged and the front's picture
    stages.inspect(cfg, layout)
    page = (layout.inspect_dir / "report.md").read_text()
    assert "precision=auto: 9 GEMMs as" in page and "| /layers.0/proj/MatMul |" in page
    assert "| all int8 |" in page and "mixed_pareto.svg" in page
    assert (layout.inspect_dir / "mixed_pareto.svg").read_text().startswith("<?xml")
    assert "Pareto front" in (layout.inspect_dir / "report.html").read_text()


def test_a_rerun_takes_the_choice_from_the_cache_and_another_gate_the_figures(
    searched, transformer_export, tmp_path
):
    cfg, _, first = searched
    assert not first["mixed"]["search_cache_hit"] and not first["mixed"]["figures_cache_hit"]
    again = stages.calibrate(cfg, fresh(transformer_export, tmp_path))
    assert again["mixed"]["search_cache_hit"] and again["gate_passed"]
    assert again["mixed"]["assignment"] == first["mixed"]["assignment"]
    # another gate: searched again, but no (GEMM, type) measured again
    looser = compose(
        *TIGHT,
        "precision.gate.min_cosine=0.995",
        f"calibration.cache_dir={cfg.calibration.cache_dir}",
    )
    other = stages.calibrate(looser, fresh(transformer_export, tmp_path / "looser"))["mixed"]
    assert not other["search_cache_hit"] and other["figures_cache_hit"]
    # whole graphs the first search judged (the single-type ones at least) are read, not run
    assert other["figures_reused"] > 0
    assert other["graphs_judged"] < first["mixed"]["graphs_judged"] - first["mixed"]["candidates"]
    assert other["weight_bytes"] <= first["mixed"]["weight_bytes"]


def int4_int8_fp16(cfg, exported: Layout, tmp_path) -> make.MixedGraphs:
    """The switchboard's graphs of the export, made as precision=auto makes them."""
    src = exported.export_dir / "model.onnx"
    source_path, source = make._common_source(src, tmp_path, fp8=False)
    results = {
        t: make._transform(t, source_path, tmp_path, cfg.precision, cfg.calibration, cfg.model)
        for t in ("int4", "int8")
    }
    return make.MixedGraphs(
        source, results["int4"].graphs, {"int8": results["int8"].graphs.plan}, True
    )


@pytest.mark.parametrize("narrow", [False, True])
def test_the_fp32_assignment_is_the_source_and_the_switchboard_agrees_with_the_graph(
    transformer_export, tmp_path, narrow
):
    """narrow: the variants stored narrow and widened in If branches, as for a model with
    external data: the same figures as the widened ones."""
    cfg = compose(*TIGHT, f"calibration.cache_dir={tmp_path / 'cache'}")
    graphs = int4_int8_fp16(cfg, transformer_export, tmp_path)
    feeds = [p[0] for p in reference_pairs(transformer_export)]
    board = graphs.switchboard(feeds, narrow)
    nodes = graphs.candidates()
    # each GEMM runs in its weight's If: the If yields its result, not a copy of the weight
    top = variants.folded(_switchable(graphs, nodes)[0], None, narrow).graph.node
    assert nodes and not [n.name for n in top if n.name in nodes]
    plain = onnx_runtime.run_model(graphs.source, feeds, None)
    for got, want in zip(board.outputs({}), plain):
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    # every type once, in turn over the GEMMs
    kinds = ["int4", "int8", "fp16", "fp32"]
    assignment = {n: kinds[i % 4] for i, n in enumerate(nodes) if kinds[i % 4] in graphs.options(n)}
    written = onnx_runtime.run_model(graphs.graph(assignment), feeds, None)
    for got, want in zip(board.outputs(assignment), written):
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=2e-3, atol=2e-3)


def test_auto_without_types_or_for_a_target_without_int4_is_refused_before_work():
    with pytest.raises(PipelineError, match=r"precision=auto needs precision.search_types"):
        compose("precision=auto", "precision.search_types=[]")
    with pytest.raises(PipelineError, match=r"SM75 cannot run int4 weights"):
        compose("precision=auto", "build.compute_capabilities=[SM75]")
    compose(
        "precision=auto", "precision.search_types=[int8,fp16]", "build.compute_capabilities=[SM75]"
    )


def test_int8_and_fp8_together_in_one_search(transformer_export, tmp_path):
    """Each plan's Q/DQ pairs carry their type in their names: two plans on one tensor
    once gave two nodes of one name, which ONNX Runtime refuses."""
    cfg = compose(
        *TIGHT,
        "precision.search_types=[int4,int8,fp8,fp16]",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = fresh(transformer_export, tmp_path)
    summary = stages.calibrate(cfg, layout)
    assert summary["gate_passed"] and "fp8" in summary["mixed"]["types"]
    graph = onnx.load(str(layout.calibrate_dir / "model.onnx"))
    names = [n.name for n in graph.graph.node]
    assert len(names) == len(set(names))


def test_a_gate_even_fp32_misses_is_one_line_before_any_sensitivity(transformer_export, tmp_path):
    cfg = compose(
        *TIGHT, "precision.gate.min_cosine=1.0", f"calibration.cache_dir={tmp_path / 'cache'}"
    )
    layout = fresh(transformer_export, tmp_path)
    with pytest.raises(PipelineError, match=r"^precision=auto: the all-fp32 graph misses the gate"):
        stages.calibrate(cfg, layout)
    assert not (layout.calibrate_dir / "model.onnx").exists()


def test_the_polish_finds_moves_that_fit_together_where_each_alone_costs_nothing():
    """A coarse metric (characters misread on a few lines) scores every GEMM 0 alone, so
    every lambda takes all of them and that fails; rounds of moves, the one that broke a
    round left out, keep as many as fit. Here any four GEMMs in int8 fail."""
    from pipeline.precision.mixed import search
    from pipeline.precision.mixed.tradeoff import Tradeoff

    nodes = [f"n{i}" for i in range(6)]
    options = {n: ["int8", "fp16", "fp32"] for n in nodes}
    sizes = {n: {"int8": 100, "fp16": 200, "fp32": 400} for n in nodes}
    sens = {n: {"int8": 0.0, "fp16": 0.0} for n in nodes}
    trade = Tradeoff(options, sizes, sens)

    def judge(assignment):
        return {"passed": sum(t == "int8" for t in assignment.values()) <= 3}

    assert not judge(trade.at(0.0))["passed"]
    points: dict = {}
    best = search._polish(judge, trade, {}, points)
    assert sorted(best.values()) == ["fp16"] * 3 + ["int8"] * 3
    assert points["polished"] == best


def test_a_chosen_graph_missing_the_gate_as_written_puts_gemms_back_in_fp32(
    searched, transformer_export, tmp_path
):
    """The written graph has the last word (the switchboard emulates fp16; the written graph
    runs it): where the chosen graph misses the gate as written (here: written graphs judged
    under a stricter gate than the search's), its most sensitive GEMMs go back to fp32, each
    count judged as written, until the fewest that pass."""
    import copy

    from omegaconf import OmegaConf

    from pipeline.precision.gate import accuracy
    from pipeline.precision.gate.tasks import OutputTasks
    from pipeline.precision.mixed import search

    cfg, _, summary = searched
    record = copy.deepcopy(summary["mixed"])
    chosen = {r["node"]: r["type"] for r in record["assignment"] if r["type"] != "fp32"}
    graphs = int4_int8_fp16(cfg, transformer_export, tmp_path)
    pairs = reference_pairs(transformer_export)

    def judged(assignment, min_cosine):
        gate = OmegaConf.create(
            {**OmegaConf.to_container(cfg.precision.gate), "min_cosine": min_cosine}
        )
        got = onnx_runtime.run_model(graphs.graph(assignment), [p[0] for p in pairs], None)
        _, results = accuracy.Criteria(gate, OutputTasks("embedding")).judge(
            [p[1] for p in pairs], got
        )
        return {"gate": results, "gate_passed": accuracy.passed(results), "n": len(assignment)}

    cosine = judged(chosen, 0.0)["gate"][0]["value"]
    strict = cosine + (1 - cosine) / 2
    best, final = search.resume(record, lambda a: judged(a, strict))
    assert final["gate_passed"] and set(best) < set(chosen)
    assert all(best[n] == chosen[n] for n in best)
    back = len(chosen) - len(best)
    assert record["counts"]["fp32"] == summary["mixed"]["counts"]["fp32"] + back
    assert record["weight_bytes"] > summary["mixed"]["weight_bytes"]
    checks = record["written_checks"]
    assert {"fp32_added": back, "passed": True} in checks
    if back > 1:
        assert {"fp32_added": back - 1, "passed": False} in checks


def test_a_run_from_a_checkpoint_is_the_whole_graphs_run(transformer_export, tmp_path):
    """The sensitivity phase runs each GEMM alone from the latest checkpoint before it
    (common/checkpoints.py): the whole graph's outputs (to float rounding)."""
    cfg = compose(*TIGHT, f"calibration.cache_dir={tmp_path / 'cache'}")
    graphs = int4_int8_fp16(cfg, transformer_export, tmp_path)
    feeds = [p[0] for p in reference_pairs(transformer_export)]
    board = graphs.switchboard(feeds, False)
    which = [1, 0]
    alone = [{n: t} for n in graphs.candidates() for t in graphs.options(n)[:-1]]
    whole = [board.outputs(a, which) for a in alone]
    assert board.resume is not None
    with board.checkpointed(which, expected_s=0.0):
        assert board.resume.open is None  # runs this quick are left whole
    with board.checkpointed(which, expected_s=3600.0):
        opened = board.resume.open
        assert opened is not None and len(opened.cuts) >= 2
        flags = [{f: a.get(n) == t for (n, t), f in board.flags.items()} for a in alone]
        resumed = [opened.outputs(f, which) for f in flags]
        # most runs start past the first node; one batch not held runs whole
        assert sum(r is not None for r in resumed) > len(alone) // 2
        assert opened.outputs(flags[-1], [2]) is None
        for a, want in zip(alone, whole, strict=True):
            for got_b, want_b in zip(board.outputs(a, which), want, strict=True):
                for name in want_b:
                    np.testing.assert_allclose(got_b[name], want_b[name], rtol=1e-5, atol=1e-6)
    assert board.resume.open is None


def test_a_checkpoint_keeps_what_a_later_subgraph_reads():
    """A tensor read only inside a later If's branch crosses the cut, as its inputs do."""
    from onnx import TensorProto, helper

    from pipeline.precision.common import checkpoints

    branch = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["o"])],
        "b",
        [],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Sigmoid", ["x"], ["b"]),
            helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch),
            helper.make_node("Add", ["y", "b"], ["z"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph)
    assert checkpoints.crossing(model, 2, {"flag"}) == ["a", "b", "c"]
    assert checkpoints.crossing(model, 3, {"flag"}) == ["b", "y"]
