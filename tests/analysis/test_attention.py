"""Which attention TensorRT runs as its fused self-attention (analysis/attention.py): the
graph's attention Softmax (a MatMul reads them; a classifier's closing one is not
attention) against the nodes the builder's log names."""

from __future__ import annotations

from onnx import TensorProto, helper

from pipeline.analysis import attention, buildlog
from pipeline.engine.trt_hooks import Record

# Lines as TensorRT-RTX 1.7's builder writes them (verbose), from a decoder's build.log.
LOG = """\
    0.100 VERBOSE        parse  /model/attn/Softmax [Softmax] outputs: [/model/attn/Softmax_output_0 -> (1, 4, -1, -1)[HALF]],
    0.101 VERBOSE        parse  /head/Softmax [Softmax] outputs: [probs -> (1, 10)[HALF]],
    0.193 VERBOSE        build  Found /model/attn/MatMul_61 to be part of self-attention pattern.
    0.193 VERBOSE        build  Found /model/attn/Softmax to be part of self-attention pattern.
"""


def _graph() -> helper.ModelProto:
    nodes = [
        helper.make_node("MatMul", ["q", "k"], ["s"], name="/model/attn/MatMul_61"),
        helper.make_node("Softmax", ["s"], ["p"], name="/model/attn/Softmax", axis=-1),
        helper.make_node("Cast", ["p"], ["p16"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["p16", "v"], ["o"], name="/model/attn/MatMul_86"),
        helper.make_node("Softmax", ["o"], ["probs"], name="/head/Softmax", axis=-1),
        helper.make_node("Softmax", ["o"], ["other"], name="/other/Softmax", axis=-1),
        helper.make_node("MatMul", ["other", "v"], ["o2"], name="/other/MatMul"),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, f, [1, 4, 4]) for n in ("q", "k", "v")],
        [helper.make_tensor_value_info(n, f, [1, 4, 4]) for n in ("probs", "o2")],
    )
    return helper.make_model(graph)


def test_attention_softmax_is_read_by_a_matmul_and_a_classifiers_is_not():
    assert attention.attention_softmax(_graph()) == ["/model/attn/Softmax", "/other/Softmax"]


def test_the_builders_log_says_which_attention_it_fused():
    summary = buildlog.summarize(buildlog.parse_log(LOG))
    assert summary["attention_found"] == ["/model/attn/MatMul_61", "/model/attn/Softmax"]
    fused = attention.measure(attention.attention_softmax(_graph()), summary["attention_found"])
    assert fused == {"softmax": 2, "fused": 1, "unfused": ["/other/Softmax"]}
    said = attention.line(fused)
    assert said.startswith("1 of 2 attention Softmax") and "/other/Softmax" in said
    assert attention.measure([], summary["attention_found"]) is None


def test_a_record_says_nothing_of_attention_without_the_verbose_lines():
    quiet = [Record("warning", "build", 0.1, "a warning")]
    assert buildlog.summarize(quiet)["attention_found"] == []
