"""A decoder's engine at its weights' size (issue 48): a Llama with tied embeddings, as
`transformers` exports it (the table twice: the Gather's and the LM head's), through
export, calibrate (fp16) and a TensorRT-RTX build. The copy is stored once and the table
is fp16: against an untied Llama of the same shapes, whose head is a weight of its own,
the tied engine is smaller by the head's fp16 bytes; the build table's figure per
parameter is in the record."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.graph import onnx_model
from pipeline.records import calibration_file, export_file
from tests.conftest import compose
from tests.helpers import quantized
from tests.wild import hf

VOCAB, HIDDEN = 4000, 128
OPEN_GATE = (
    "min_cosine=0.0",
    "min_top1_agreement=0.0",
    "max_rel_error=null",
    "max_abs_error=null",
    "max_perplexity_increase=null",
)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def built(
    tmp_path, tied: bool, precision: str = "fp16", *extra: str, vocab: int = VOCAB
) -> tuple[Layout, dict]:
    pytest.importorskip("transformers")
    # MLP width a multiple of int4's block: ModelOpt makes the int4 graph, not the streamed path
    model = hf.llama(
        tmp_path / f"llama_{tied}_{vocab}.onnx",
        hidden=HIDDEN,
        intermediate=256,
        vocab=vocab,
        tied=tied,
    )
    ids = np.random.default_rng(0).integers(1, vocab, (4, 12))
    np.save(tmp_path / "prompts.npy", ids)
    cfg = compose(
        "model=onnx_file",
        f"model.onnx_path={model}",
        f"model.source={model}",
        f"model.prompts={tmp_path / 'prompts.npy'}",
        "model.decode_steps=2",
        "profile.decoder={max_batch: 1, max_input_len: 16, max_seq_len: 32}",
        f"precision={precision}",
        *extra,
        f"calibration.cache_dir={tmp_path / 'cache'}",
        f"build.store_dir={tmp_path / 'store'}",
        "build.reference_engines=never",
    )
    layout = Layout(tmp_path / f"run_{tied}_{precision}_{vocab}")
    stages.fingerprint(cfg, layout)
    stages.export(cfg, layout)
    assert stages.calibrate(cfg, layout)["gate_passed"]
    return layout, dict(stages.build(cfg, layout, progress=False))


def test_a_tied_decoders_engine_holds_its_table_once_in_fp16(tmp_path):
    tied, tied_record = built(tmp_path, tied=True)
    untied, untied_record = built(tmp_path, tied=False)
    normalized = export_file.read(tied.export_dir)["normalized"]
    assert any(line.startswith("tied weights stored once: ") for line in normalized)
    assert not any("tied" in line for line in export_file.read(untied.export_dir)["normalized"])

    graph = onnx_model.load(tied.calibrate_dir / "model.onnx", check=False)
    tables = [i for i in graph.graph.initializer if sorted(i.dims) == sorted([VOCAB, HIDDEN])]
    assert [t.data_type for t in tables] == [10]  # one table, fp16
    summary = calibration_file.read(tied.calibration_summary)
    assert summary["autocast"]["tables"]["fp16"]

    head_fp16 = VOCAB * HIDDEN * 2
    saved = untied_record["engine"]["bytes"] - tied_record["engine"]["bytes"]
    assert saved > 0.9 * head_fp16, (saved, head_fp16)
    per = tied_record["per_parameter"]
    assert per["ideal"] == 2.0
    assert per["parameters"] == summary["weights"]["parameters"]
    assert per["bytes"] == pytest.approx(tied_record["engine"]["bytes"] / per["parameters"], 1e-3)


def test_a_tied_decoders_int4_engine_holds_its_table_once_in_int4(tmp_path):
    """ModelOpt gives each reader of the table its own copy; the head's copy, read through
    the tie's Transpose, is no GEMM weight it quantizes, and stayed fp32 in the engine: the
    int4 engine came out larger than the fp16 one. Stored once again, the Gather and the
    head read one int4 table. The gate is opened: random weights say nothing of accuracy. The
    vocabulary is widened so that the table, not TensorRT-RTX's code, sets the bytes."""
    vocab = 4 * VOCAB
    _, fp16_record = built(tmp_path, True, vocab=vocab)
    gate = (f"precision.gate.{g}" for g in OPEN_GATE)
    layout, record = built(tmp_path, True, "int4_rtn", *gate, "precision.holdout=0", vocab=vocab)
    graph = onnx_model.load(layout.calibrate_dir / "model.onnx", check=False)
    tables = [i for i in graph.graph.initializer if sorted(i.dims) == sorted([vocab, HIDDEN])]
    assert [t.data_type for t in tables] == [22]  # one table, int4
    summary = calibration_file.read(layout.calibration_summary)
    assert summary["tables"]["int4"]
    assert summary["calibration"]["stored_once"]
    assert record["engine"]["bytes"] < 0.75 * fp16_record["engine"]["bytes"]


def test_a_tied_heads_int8_weight_is_scaled_per_row_of_its_table_both_ways(tmp_path):
    """The head reads the table through the tie's Transpose, a tensor ModelOpt calibrates
    as an activation: one entropy-clipped scale for every row, and 4000 x 128 floats taken as
    an output of every batch. Scaled as the weight it is: max |row| / 127 per vocabulary
    row, by the streamed plan and over ModelOpt's alike, and TensorRT-RTX builds it."""
    np.save(tmp_path / "calibration.npy", np.random.default_rng(1).integers(1, VOCAB, (8, 12)))
    gate = (f"precision.gate.{g}" for g in OPEN_GATE)
    calibration = ("calibration=prompts", f"calibration.path={tmp_path / 'calibration.npy'}")
    layout, record = built(tmp_path, True, "int8", *gate, "precision.holdout=0", *calibration)
    assert record["engine"]["bytes"] > 0

    graph = onnx_model.load(layout.export_dir / "model.onnx", check=False)
    (tie,) = [n for n in graph.graph.node if n.name.endswith("::tied")]
    table = next(i for i in graph.graph.initializer if i.name == tie.input[0])
    rows = np.abs(numpy_helper.to_array(table)).max(axis=1) / 127

    def head_scale(streaming: str) -> np.ndarray:
        _, result = quantized(
            layout,
            tmp_path / streaming,
            "model=onnx_file",
            f"model.onnx_path={layout.export_dir / 'model.onnx'}",
            "precision=int8",
            *calibration,
            f"calibration.streaming={streaming}",
        )
        plan = result.graphs.plan
        (edge,) = [e for e in plan.edges if e[1] == 1 and e[0].startswith("/m/lm_head/")]
        spec = plan.edges[edge]
        assert spec.q_attrs == (("axis", 1),)
        return numpy_helper.to_array(spec.scale)

    streamed, modelopts = head_scale("always"), head_scale("never")
    np.testing.assert_allclose(streamed, rows, rtol=1e-6)
    np.testing.assert_array_equal(streamed, modelopts)
