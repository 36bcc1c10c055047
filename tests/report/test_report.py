"""Inspect reports from real builds: JSON, Markdown and one self-contained HTML page
with the graph drawn as inline SVG (repeated blocks folded), for both bundled models."""

import itertools
import re
import time

from onnx import TensorProto, helper

from pipeline.analysis import engine_layers, node_precision
from pipeline.core import fileio
from pipeline.flow import stages
from pipeline.report.inspect import report_graph, report_html, report_markdown
from pipeline.report.pictures import graph_svg
from tests.helpers import built_report as _report
from tests.helpers import self_contained as _self_contained


def test_cnn_report(built_cnn, tmp_path):
    r = _report(built_cnn, tmp_path)
    assert r["model"]["exported"]["ops"]["Conv"] == 4 and r["model"]["built"]["opset"] == 17
    assert (
        r["model"]["exported"]["inputs"][0]["name"] == "images"
        and r["model"]["exported"]["parameters"] > 1000
    )
    conv = next(l for l in r["network"]["layers"] if l["type"] == "convolution")
    assert conv["precision"] == "fp32" and conv["outputs"][0]["shape"][1:] == [16, 32, 32]
    assert r["engine"]["inspector"] == {"available": False, "reason": "not tried in this test"}
    rows = r["fusion"]["rows"]
    assert rows and "/features/features.0/features.0.0/Conv" in rows[0]["onnx_nodes"]
    g = r["graph"]
    assert not g["folded"]  # a Conv and its Relu per block: small enough to draw whole
    ops = [n["label"] for n in g["nodes"] if n["kind"] == "op"]
    assert ops.count("Conv") == 4 and ops.count("Relu") == 4 and "Gemm" in ops
    assert {n["precision"] for n in g["nodes"] if n["kind"] == "op"} == {"fp32"}
    assert len(g["edges"]) == len(g["nodes"]) - 1  # one chain from images to logits
    md = report_markdown.to_markdown(r, 50)
    assert (
        "## Fusions" in md
        and "## TensorRT network after parsing" in md
        and "engine inspector: absent" in md
    )
    page = report_html.to_html(r)
    _self_contained(page)
    assert page.count("<svg") >= 3 and ">Conv</text>" in page and "not tried in this test" in page
    for heading in (
        "Graph",
        "Precision",
        "Fusions: ONNX nodes → engine layers",
        "Engine",
        "Build log",
        "TensorRT network after parsing",
        "ONNX model",
    ):
        assert f"<h2>{heading}</h2>" in page


def test_transformer_report_folds_repeated_layers(built_transformer, tmp_path):
    r = _report(built_transformer, tmp_path)
    g = r["graph"]
    assert g["folded"] == [
        {
            "family": "/layers.#",
            "instances": ["/layers.0", "/layers.1"],
            "nodes_each": g["folded"][0]["nodes_each"],
        }
    ]
    groups = [n for n in g["nodes"] if n["kind"] == "group"]
    assert [n["label"] for n in groups] == ["layers.0", "layers.1"]
    assert all(sum(n["mix"].values()) > 20 for n in groups)
    assert ("g:/layers.0", "g:/layers.1") in [tuple(e) for e in g["edges"]]
    assert len(g["nodes"]) < 40 and g["details"][0]["title"].startswith("inside /layers.0")
    assert any(INT64 in w for w in r["build_log"]["warnings"] for INT64 in ["Int64 binding"])
    page = report_html.to_html(r)
    _self_contained(page)
    assert 'id="onnx-graph"' in page and 'id="detail-0"' in page and "Folded 2 repeats" in page


def test_report_from_a_detailed_build(built_transformer_detailed):
    _cfg, layout = built_transformer_detailed
    r = fileio.read_json(layout.inspect_dir / "report.json")
    eng = r["engine"]
    assert (
        eng["layers_source"] == "build log (ProfilingVerbosity.DETAILED)" and eng["layers_detailed"]
    )
    assert eng["precisions"]["fp32"] >= 10 and len(eng["layers"]) > 10
    assert (
        r["fusion"]["source"] == "engine layers' metadata" and r["fusion"]["onnx_nodes_mapped"] > 30
    )
    assert "no GPU" in eng["inspector"]["reason"] or eng["inspector"]["available"]
    eg = r["engine_graph"]
    assert len(eg["nodes"]) > 10 and len(eg["edges"]) >= len(eg["nodes"]) - 3
    page = (layout.inspect_dir / "report.html").read_text()
    _self_contained(page)
    assert report_html.to_html(r) == page  # report.json alone is enough to draw the page
    assert 'id="engine-graph"' in page and "Engine layers after fusion" in page
    assert (layout.inspect_dir / "report.md").read_text().startswith("# Engine report: fp32")


def _stacked_blocks(n_blocks: int, ops_per_block: int):
    nodes, x = [], "x"
    for b in range(n_blocks):
        for k in range(ops_per_block):
            y = f"/blocks.{b}/op{k}_out"
            nodes.append(
                helper.make_node(
                    "Relu" if k % 2 else "Sigmoid", [x], [y], name=f"/blocks.{b}/op{k}"
                )
            )
            x = y
    nodes.append(helper.make_node("Identity", [x], ["y"], name="/head/Identity"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_few_hundred_layers_stay_readable():
    model = _stacked_blocks(40, 8)  # 321 nodes
    t0 = time.perf_counter()
    g = report_graph.onnx_graph(model, lambda name, out: ("fp16", "test"), max_nodes=150)
    svg = graph_svg.render(g["nodes"], g["edges"], "big")
    assert time.perf_counter() - t0 < 10
    assert len(g["nodes"]) == 40 + 3 and g["folded"][0]["nodes_each"] == [8] * 40
    assert (
        svg.count('class="node group"') == 40
        and float(re.search(r'viewBox="0 0 (\d+)', svg).group(1)) < 1000
    )


def test_too_many_modules_fold_again_then_truncate():
    nodes = [
        {
            "id": f"n{i}",
            "name": f"/m{i % 5}/op{i}",
            "label": "Relu",
            "kind": "op",
            "precision": "fp32",
        }
        for i in range(400)
    ]
    g = report_graph.collapse(
        {"nodes": nodes, "edges": [(f"n{i}", f"n{i + 1}") for i in range(399)]}, 100
    )
    assert [n["label"] for n in g["nodes"]] == [f"m{i}" for i in range(5)] and not g["truncated"]
    flat = [
        {"id": f"n{i}", "name": f"op{i}", "label": "Relu", "kind": "op", "precision": "fp32"}
        for i in range(300)
    ]
    g = report_graph.collapse({"nodes": flat, "edges": []}, 100)
    assert len(g["nodes"]) == 100 and g["truncated"] == 200


def test_layout_keeps_boxes_apart_and_routes_long_edges():
    nodes = [{"id": c, "label": c, "kind": "op", "precision": "fp16"} for c in "abcdef"]
    edges = [
        ("a", "b"),
        ("b", "c"),
        ("c", "d"),
        ("a", "d"),
        ("a", "e"),
        ("e", "f"),
        ("f", "d"),
        ("d", "a"),
    ]
    lay = graph_svg.layout(nodes, edges)  # d→a closes a cycle: drawn, not laid out
    assert lay["y"]["a"] < lay["y"]["b"] < lay["y"]["c"] < lay["y"]["d"]
    by_row = {}
    for n in "abcdef":
        by_row.setdefault(lay["y"][n], []).append(lay["x"][n])
    for xs in by_row.values():
        xs.sort()
        assert all(b - a >= graph_svg.SIZES["op"][0] for a, b in itertools.pairwise(xs))
    long_edge = next(c for c in lay["chains"] if c[0] == "a" and c[-1] == "d")
    assert len(long_edge) == 4  # two bend points between a and d
    svg = graph_svg.render(nodes, edges, "t")
    assert svg.count("<path d=") == len(edges) + 1  # edges plus the arrow head


def test_report_says_when_calibration_data_was_random(tmp_path):
    from pipeline.core.layout import Layout
    from tests.conftest import compose

    cfg = compose(
        "model=cnn",
        "precision=int8",
        "calibration=random",
        f"build.store_dir={tmp_path / 'store'}",
        f"calibration.cache_dir={tmp_path / 'calib'}",
    )
    layout = Layout(tmp_path)
    for name in ("fingerprint", "export", "calibrate", "build", "inspect"):
        stages.BY_NAME[name](cfg, layout)
    report = fileio.read_json(layout.inspect_dir / "report.json")
    assert report["precision_transform"]["calibration_data"]["random"] is True
    assert "RANDOM data" in (layout.inspect_dir / "report.md").read_text()
    assert "random data, not representative" in (layout.inspect_dir / "report.html").read_text()


def test_int8_nodes_take_the_precision_of_the_kernel_that_computes_them(built_cnn_int8, tmp_path):
    """A Conv runs at its int8 kernel's precision though fp32 epilogues name it too; a
    Relu at the type it computes in; the optimizer's single region is not a layer count."""
    r = _report(built_cnn_int8, tmp_path)
    nodes = r["graph"]["nodes"] + [n for d in r["graph"]["details"] for n in d["nodes"]]
    by_op = {}
    for n in nodes:
        if n["kind"] == "op":
            by_op.setdefault(n["label"], set()).add(n["precision"])
    assert (
        by_op["Conv"] == {"int8"}
        and by_op["Relu"] == {"fp32"}
        and by_op["QuantizeLinear"] == {"int8"}
    )
    conv = next(n for n in nodes if n["label"] == "Conv")
    assert "(engine kernel /features/" in conv["tooltip"]
    log = r["build_log"]
    assert (
        log["optimizer"]["layers_after"] == 1
        and log["layers_final"] == len(r["engine"]["layers"]) > 1
    )
    assert log["fusion_ratio"] == round(log["layers_original"] / log["layers_final"], 3)
    page = report_html.to_html(r, use_dot=False)
    assert f"{log['optimizer']['layers_parsed']} → 1 layers: 1 Myelin region" in page
    assert (
        f"<b>{log['layers_original']} → {log['layers_final']}</b><span>ONNX compute nodes → engine layers"
        in page
    )


def test_a_gemm_is_its_kernel_not_its_epilogue():
    """The transformer int8 case, in miniature: Myelin names the qkv MatMul in its int8
    GEMM and in three fp32 epilogues; the Range in a kernel that ends with a quantize."""

    def layer(name, kind, ins, outs, nodes):
        inputs, outputs = [{"dtype": d} for d in ins], [{"dtype": d} for d in outs]
        matrix = engine_layers.is_matrix_kernel(kind, name)
        return {
            "name": name,
            "type": kind,
            "onnx_nodes": nodes,
            "precision": engine_layers.layer_precision(inputs, outputs, matrix),
        }

    layers = [
        layer(
            "__myl_CastGathIotaCastReshCastGathAddMulMinMaxRounCast",
            "kgen",
            ["int64"],
            ["int8"],
            ["/Range", "/tokens/Gather", "/Add_output_0_QuantizeLinear"],
        ),
        layer("__mye1+__mye2_myl0_2", "gemm", ["int8"], ["fp32"], ["/layers.0/qkv/MatMul"]),
        *[
            layer(
                f"__myl_MulAddMulMinMaxRounCast_{i}",
                "kgen",
                ["fp32"],
                ["int8"],
                ["/layers.0/qkv/MatMul", "/layers.0/qkv/Add"],
            )
            for i in range(3)
        ],
        layer(
            "__myl_CastMulMulAddMulMinMaxRounCast",
            "kgen",
            ["int8", "fp32"],
            ["int8"],
            ["/layers.0/Add_1"],
        ),
    ]
    assert [l["precision"] for l in layers] == ["int8", "int8", "fp32", "fp32", "fp32", "fp32"]
    ops = {
        "/Range": "Range",
        "/tokens/Gather": "Gather",
        "/layers.0/qkv/MatMul": "MatMul",
        "/layers.0/qkv/Add": "Add",
        "/layers.0/Add_1": "Add",
    }
    network = {
        "/Range": "int64",
        "/tokens/Gather": "fp32",
        "/layers.0/qkv/Add": "fp32",
        "/layers.0/Add_1": "fp32",
    }
    precision_of = node_precision.resolver(ops, layers, True, network, {}, {})
    assert precision_of("/layers.0/qkv/MatMul", "") == (
        "int8",
        "engine kernel __mye1+__mye2_myl0_2",
    )
    assert (
        precision_of("/Range", "")[0] == "int64" and precision_of("/tokens/Gather", "")[0] == "fp32"
    )
    assert (
        precision_of("/layers.0/qkv/Add", "")[1]
        == "TensorRT network, fused into __myl_MulAddMulMinMaxRounCast_0"
    )
