"""Weights stored once (pipeline/graph/tied_weights.py), on decoders as `transformers`
exports them: a tied Llama writes its token table twice, an untied one does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from pipeline.graph import onnx_model, tied_weights, weight_counts
from pipeline.graph.onnx_runtime import run_batches
from tests.wild import hf

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def llamas(tmp_path_factory):
    pytest.importorskip("transformers")
    tmp = tmp_path_factory.mktemp("llama")
    return {
        tied: hf.llama(tmp / f"tied_{tied}.onnx", vocab=2000, tied=tied) for tied in (True, False)
    }


def feeds() -> dict[str, np.ndarray]:
    f = hf.gpt2_feeds(2, 2, 16, batch=1, seq=4, past=3)
    f["input_ids"] %= 2000
    f["position_ids"] = np.arange(3, 7, dtype=np.int64)[None]
    return f


def test_a_tied_head_is_found_by_value_and_read_through_a_transpose(llamas, tmp_path):
    model = onnx_model.load(llamas[True], check=False)
    before = onnx_model.parameter_count(model)
    # whatever the exporter named them: the names here are not the exporter's
    for i, init in enumerate(model.graph.initializer):
        old = init.name
        init.name = f"w{i}"
        for node in model.graph.node:
            node.input[:] = [init.name if x == old else x for x in node.input]
    ties = tied_weights.store_once(model, None)
    assert len(ties) == 1 and ties[0].transposed
    kept = {i.name: i for i in model.graph.initializer}[ties[0].kept]
    assert list(kept.dims) == [2000, 64]  # the Gather's table is what stays
    assert onnx_model.parameter_count(model) == before - 2000 * 64
    out = tmp_path / "tied.onnx"
    onnx.save(model, out)
    want = run_batches(llamas[True], [feeds()])[0]
    got = run_batches(out, [feeds()])[0]
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    counts = weight_counts.counts(model)
    assert counts["parameters"] == onnx_model.parameter_count(model) - _int_elements(model)
    # the head's weight is a GEMM weight though it is read through the Transpose
    assert counts["gemm"] > 2000 * 64


def test_an_untied_head_and_weights_of_one_shape_are_left_alone(llamas):
    model = onnx_model.load(llamas[False], check=False)
    assert tied_weights.store_once(model, None) == []


def test_a_copy_read_inside_a_subgraph_is_left_alone():
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)
    then = helper.make_graph(
        [helper.make_node("MatMul", ["x", "b"], ["y"])],
        "then",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "a"], ["z"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "a"), numpy_helper.from_array(w.copy(), "b")],
    )
    model = helper.make_model(graph)
    assert tied_weights.store_once(model, None) == []
    assert {i.name for i in model.graph.initializer} == {"a", "b"}


def _int_elements(model) -> int:
    return sum(
        int(np.prod(i.dims)) for i in model.graph.initializer if i.data_type not in (1, 10, 16)
    )


def test_tables_of_one_shape_in_external_data_are_compared_by_a_row_not_read_whole(tmp_path):
    """A model sharded into many same-shaped tables (models/large_table.py, as torch writes a
    large model): each pair is compared, and reading every candidate whole beside every
    table read the model once per table (a 2.2 GB model of 200 tables: 37 s of its export).
    Mapped, a pair that differs costs a row: this process reads far less than one pass over
    the model's bytes (`rchar` counts read() calls, not the pages of a mapping)."""
    from models import large_table

    path = large_table.write(tmp_path / "model", mib=32, files=16)
    model = onnx_model.load(path, check=False, weights=False)
    weights = sum(f.stat().st_size for f in path.parent.iterdir() if f.name != path.name)

    def read_so_far() -> int:
        io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
        return int(io["rchar"])

    before = read_so_far()
    assert tied_weights.find(model, path.parent) == []
    assert read_so_far() - before < weights / 4
