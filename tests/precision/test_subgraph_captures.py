"""Each subgraph reads a shared outer tensor under a name of its own, and the graph
computes what it did (precision/autocast/captures.py, ahead of AutoCast)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from pipeline.graph import onnx_runtime
from pipeline.precision.autocast import captures


def _branch(name: str, op: str, out: str, reads: str, nested: onnx.NodeProto | None = None):
    nodes = [helper.make_node(op, [reads, reads], [out])]
    if nested is not None:
        nodes = [nested, helper.make_node(op, [reads, "inner"], [out])]
    vi = helper.make_tensor_value_info(out, TensorProto.FLOAT, [2])
    return helper.make_graph(nodes, name, [], [vi])


def model_of(else_reads: str) -> onnx.ModelProto:
    """`a` read by the then branch of an If and both branches of an If nested in it; the
    else branch reads `else_reads`. Both graphs of each If carry one name, as exporters'
    do."""
    inner = helper.make_node(
        "If",
        ["c"],
        ["inner"],
        then_branch=_branch("sub", "Sub", "i1", "a"),
        else_branch=_branch("sub", "Max", "i2", "a"),
    )
    top = helper.make_node(
        "If",
        ["c"],
        ["y"],
        then_branch=_branch("sub_graph", "Add", "t", "a", inner),
        else_branch=_branch("sub_graph", "Mul", "e", else_reads),
    )
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]), top],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _subgraphs(graph: onnx.GraphProto):
    for node in graph.node:
        for body in captures._bodies(node):
            yield body
            yield from _subgraphs(body)


def test_each_subgraph_reads_a_shared_capture_through_its_own_identity():
    model = model_of(else_reads="a")
    feeds = [{"x": np.array([-1.0, 2.0], np.float32), "c": np.array(c)} for c in (True, False)]
    want = onnx_runtime.run_model(model, feeds, None)
    assert captures.one_per_subgraph(model) == 4  # 2 branches, 2 nested branches
    onnx.checker.check_model(model, full_check=True)
    got = onnx_runtime.run_model(model, feeds, None)
    assert all(np.array_equal(g["y"], w["y"]) for g, w in zip(got, want))
    names = set()
    for body in _subgraphs(model.graph):
        first, *rest = body.node
        assert first.op_type == "Identity" and first.output[0] not in names
        names.add(first.output[0])
        # the rest read the subgraph's own name, never the shared one
        assert all(first.input[0] not in n.input for n in rest)
        assert any(first.output[0] in n.input for n in rest)


def _then(node: onnx.NodeProto) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == "then_branch")


def test_a_capture_no_two_subgraphs_share_is_left_alone():
    model = model_of(else_reads="x")
    then = _then(model.graph.node[1])
    for attr in then.node[0].attribute:  # the nested Ifs' branches read a tensor of `then`
        attr.g.node[0].input[:] = ["t_in", "t_in"]
    then.node.insert(0, helper.make_node("Neg", ["a"], ["t_in"]))
    # `x` and `a` are each read by one top branch; `t_in` by both nested branches
    assert captures.one_per_subgraph(model) == 2
    then = _then(model.graph.node[1])
    assert [n.op_type for n in then.node] == ["Neg", "If", "Add"]  # its own reads untouched
    assert [n.input[0] for n in then.node] == ["a", "c", "a"]
    for attr in then.node[1].attribute:
        assert attr.g.node[0].op_type == "Identity"
