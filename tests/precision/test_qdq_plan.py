"""Tensor-level Q/DQ placement (pipeline/precision/qdq/plan.py) on real ModelOpt graphs:
which readers see the quantized value, and "keep in fp32" meaning the fp32 graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from pipeline.core.errors import PipelineError
from pipeline.graph import onnx_runtime
from pipeline.precision.common import ops
from pipeline.precision.gate import accuracy
from pipeline.precision.qdq import plan
from tests.conftest import compose
from tests.helpers import quantized, reference_pairs

OUTPUTS = {"outlier_bert": "embedding", "cnn": "logits"}


def run(graphs, model, layout):
    return graphs.run(model, [p[0] for p in reference_pairs(layout)])


def dq_readers(model) -> dict[str, list[str]]:
    """For each DequantizeLinear output, the op types that read it."""
    producer = {o: n.op_type for n in model.graph.node for o in n.output}
    out: dict[str, list[str]] = {}
    for n in model.graph.node:
        for x in n.input:
            if producer.get(x) == "DequantizeLinear":
                out.setdefault(x, []).append(n.op_type)
    return out


@pytest.mark.parametrize("precision", ["int8", "fp8"])
@pytest.mark.parametrize("placement", ["gemm_inputs", "modelopt"])
@pytest.mark.parametrize("model", ["outlier_bert", "cnn"])
def test_keeping_every_candidate_is_the_fp32_graph_bit_for_bit(
    request, tmp_path, model, placement, precision
):
    layout = request.getfixturevalue("bert_export" if model == "outlier_bert" else "cnn_export")
    _, result = quantized(
        layout,
        tmp_path,
        f"model={model}",
        f"precision={precision}",
        f"precision.qdq_placement={placement}",
    )
    graphs = result.graphs
    everything = graphs.graph(graphs.plan.candidates())
    assert not {"QuantizeLinear", "DequantizeLinear"} & {n.op_type for n in everything.graph.node}
    got = run(graphs, everything, layout)
    for out, (_, ref) in zip(got, reference_pairs(layout)):
        for name in ref:
            np.testing.assert_array_equal(out[name], ref[name])


def test_modelopt_placement_is_modelopts_graph_and_gemm_inputs_spares_the_residual(
    bert_export, tmp_path
):
    _, result = quantized(
        bert_export, tmp_path, "model=outlier_bert", "precision=int8",
        "precision.qdq_placement=modelopt",
    )  # fmt: skip
    graphs = result.graphs
    entry = next((tmp_path / "cache" / "entries").iterdir()) / "model.onnx"
    modelopt = onnx.load(entry)
    # the plan re-placed on the fp32 graph computes what ModelOpt's own graph computes
    for a, b in zip(run(graphs, graphs.graph(), bert_export), run(graphs, modelopt, bert_export)):
        np.testing.assert_array_equal(a["embedding"], b["embedding"])
    readers = {op for ops in dq_readers(graphs.graph()).values() for op in ops}
    assert "Add" in readers  # ModelOpt rounds the residual stream's Adds
    assert not {"Shape", "Size"} & readers  # shape readers never see a quantized value

    graphs.plan.placement = "gemm_inputs"
    plain = graphs.graph()
    assert {op for ops in dq_readers(plain).values() for op in ops} <= set(ops.GEMMS)
    tensors = plan.quantized_tensors(plain)
    # LayerNorm outputs quantized for Q/K/V (one pair, three readers) or for the FFN are
    # read unquantized by the residual Add
    shared = [t for t in tensors if "LayerNormalization" in t["tensor"]]
    assert any(len(t["quantized_readers"]) == 3 for t in shared)
    assert shared and all(t["unquantized_readers"] for t in shared)
    assert any(t["weight"] for t in tensors) and any(not t["weight"] for t in tensors)


def test_modelopt_placement_misses_the_gate_with_every_matmul_in_fp32(bert_export, tmp_path):
    """The failure real BERTs show: what rounds the residual stream is not a MatMul."""
    cfg, result = quantized(
        bert_export, tmp_path, "model=outlier_bert", "precision=int8",
        "precision.qdq_placement=modelopt",
    )  # fmt: skip
    graphs, pairs = result.graphs, reference_pairs(bert_export)

    def worst_cosine(model) -> float:
        got = graphs.run(model, [p[0] for p in pairs])
        return accuracy.compare([p[1] for p in pairs], got, "embedding")["embedding"]["cosine"]

    matmuls = [n for n, op in graphs.plan.op_types.items() if op in ops.GEMMS]
    modelopt_plain = worst_cosine(graphs.graph())
    modelopt_no_matmul = worst_cosine(graphs.graph(matmuls))
    graphs.plan.placement = "gemm_inputs"
    tensor_level = worst_cosine(graphs.graph())
    gate = cfg.precision.gate.min_cosine
    assert modelopt_plain < gate and modelopt_no_matmul < gate
    assert tensor_level > modelopt_no_matmul > modelopt_plain


def test_unknown_placement_is_one_line():
    with pytest.raises(
        PipelineError, match=r"precision.qdq_placement: Invalid value 'tensors', expected one of"
    ):
        compose("precision=int8", "precision.qdq_placement=tensors")


def test_materialize_shares_one_pair_between_readers_of_one_tensor(bert_export, tmp_path):
    _, result = quantized(bert_export, tmp_path, "model=outlier_bert", "precision=int8")
    plain = result.graphs.graph()
    quantize_inputs = [n.input[0] for n in plain.graph.node if n.op_type == "QuantizeLinear"]
    assert len(quantize_inputs) == len(set(quantize_inputs))
    onnx.checker.check_model(plain)
    assert onnx_runtime.run_batches(plain.SerializeToString(), [reference_pairs(bert_export)[0][0]])
