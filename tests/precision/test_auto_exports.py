"""precision=auto on graphs as real exporters write them (tests/wild/hf.py: `transformers`
BertModel with an attention mask and mean pooling, GPT-2 with a KV cache; a graph of
convolutions only). Random weights: these tests say "it runs and its record is right",
not how accurate a real checkpoint gets."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from pipeline.core.layout import Layout
from pipeline.flow import stages
from tests.conftest import compose
from tests.wild import hf

TOKENS = "[1x8, 2x16, 4x32]"
BERT_SHAPES = f"{{input_ids: {TOKENS}, attention_mask: {TOKENS}, token_type_ids: {TOKENS}}}"
BERT_RANGES = "{input_ids: [0, 999], attention_mask: [0, 1], token_type_ids: [0, 1]}"
PAST = "[1x4x1x16, 1x4x8x16, 2x4x16x16]"
GPT2_SHAPES = (
    "{input_ids: [1x1, 1x4, 2x8], attention_mask: [1x2, 1x12, 2x24], "
    + ", ".join(f"past_key_values.{i}.{kv}: {PAST}" for i in range(2) for kv in ("key", "value"))
    + "}"
)


def _convs(path: Path) -> Path:
    """Convolutions and activations only: no MatMul or Gemm for int4 to take."""
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.Sigmoid(),
    ).eval()
    with torch.no_grad():
        torch.onnx.export(
            net,
            (torch.zeros(1, 3, 32, 32),),
            str(path),
            input_names=["x"],
            output_names=["map"],
            dynamic_axes={"x": {0: "batch"}, "map": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    return path


MODELS = {
    "bert": (hf.bert, BERT_SHAPES, (f"model.input_ranges={BERT_RANGES}",)),
    "gpt2": (
        hf.gpt2,
        GPT2_SHAPES,
        ("model.input_ranges={input_ids: [0, 999], attention_mask: [0, 1]}",),
    ),
    "convs": (_convs, "{x: [1x3x32x32, 2x3x32x32, 4x3x32x32]}", ()),
}


def _searched(name: str, tmp: Path, *overrides: str):
    make, shapes, extra = MODELS[name]
    tmp.mkdir(parents=True, exist_ok=True)
    model = make(tmp / f"{name}.onnx")
    cfg = compose(
        "model=onnx_file",
        f"model.onnx_path={model}",
        f"profile.shapes={shapes}",
        "precision=auto",
        "precision.objective=weight_bytes",  # the mechanism: tiny graphs answer fp16 by engine
        "calibration.source=random",
        "calibration.num_samples=16",
        f"calibration.cache_dir={tmp / 'cache'}",
        *extra,
        *overrides,
    )
    layout = Layout(tmp)
    stages.export(cfg, layout)
    return model, layout, stages.calibrate(cfg, layout)


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_auto_runs_on_transformers_exports_and_keeps_the_models_own_wheres(name, tmp_path):
    """The attention-mask Where (BERT) and the causal-mask Where (GPT-2) are the model's:
    the switchboard's If branches are made of its own Wheres only (these graphs stopped
    ONNX Runtime with 'condition input must have exactly one element')."""
    model, layout, summary = _searched(name, tmp_path)
    record = summary["mixed"]
    assert summary["gate_passed"] and record["candidates"] > 0
    assert record["counts"]["fp32"] < record["candidates"]
    own = {n.name for n in onnx.load(str(model)).graph.node if n.op_type == "Where"}
    written = onnx.load(str(layout.calibrate_dir / "model.onnx")).graph
    assert own and own <= {n.name for n in written.node if n.op_type == "Where"}
    # the token embedding table (1000 x 64) is no GEMM: in the cheapest type the gate holds
    # in (int4 first: the graph holds int4 weights already), judged as written
    tables = summary["tables"]
    kind = "int4" if "int4" in tables else "fp16"
    # GPT-2's table is its tied head too: the graph names its fp32 copy (AutoCast's suffix)
    table = "m.embeddings.word_embeddings.weight" if name == "bert" else "m.transformer.wte.weight"
    [table] = [t for t in tables[kind] if t.startswith(table)]
    assert kind == "int4" or "int4" in tables["missed_the_gate"]
    stored = {i.name: i.data_type for i in written.initializer}
    as_stored = {"int4": (f"{table}_i4", onnx.TensorProto.INT4)}
    as_stored["fp16"] = (f"{table}::fp16", onnx.TensorProto.FLOAT16)
    assert stored[as_stored[kind][0]] == as_stored[kind][1] and table not in stored


def test_entropy_calibration_of_a_float_min_mask_falls_back_to_max_with_a_line(tmp_path, capsys):
    """GPT-2's causal mask fills with float32's minimum: ModelOpt's entropy histogram of it
    cannot be made. Where ModelOpt calibrates every op type (precision.qdq_placement=modelopt),
    int8 is calibrated by max and the record and a line say so; the default placement asks
    for the GEMMs alone, whose inputs the mask is not, and keeps entropy."""
    _, _, summary = _searched("gpt2", tmp_path / "every", "precision.qdq_placement=modelopt")
    int8 = summary["calibration"]["types"]["int8"]
    assert int8["modelopt_method"] == "max" and int8["method"] == "entropy"
    assert "Too many bins" in int8["method_fallback"]
    assert "calibrated by max" in capsys.readouterr().err
    _, _, summary = _searched("gpt2", tmp_path / "gemms")
    int8 = summary["calibration"]["types"]["int8"]
    assert int8["modelopt_method"] == "entropy" and "method_fallback" not in int8


def test_a_type_that_fits_no_node_is_left_out_of_the_search_with_a_line(tmp_path, capsys):
    _, _, summary = _searched("convs", tmp_path)
    record = summary["mixed"]
    assert summary["gate_passed"] and set(record["left_out"]) == {"int4"}
    assert record["counts"]["int4"] == 0 and record["counts"]["int8"] > 0
    assert "leaves int4 out of its search" in capsys.readouterr().err
    # the weights as stored, by type: 3x16x3x3 and 16x16x3x3 convolution weights
    stored = summary["calibration"]["gemm_weights"]["bytes"]
    size = {"int8": 1, "fp16": 2, "fp32": 4}
    assert sum(v / size[k] for k, v in stored.items()) == 16 * 3 * 9 + 16 * 16 * 9
    assert stored.get("int8", 0) > 0


def test_a_gate_judged_on_random_inputs_says_so_in_its_line_and_table(tmp_path, capfd):
    """No model.reference_data: the reference inputs are drawn at random, and the failure
    line and the stage table say so (a healthy graph can fail on them)."""
    from pipeline.core.errors import PipelineError

    model = _convs(tmp_path / "convs.onnx")
    overrides = (
        "model=onnx_file",
        f"model.onnx_path={model}",
        f"profile.shapes={MODELS['convs'][1]}",
        "calibration.source=random",
        "calibration.num_samples=16",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = Layout(tmp_path)
    stages.export(compose(*overrides), layout)
    with pytest.raises(PipelineError) as failed:
        stages.calibrate(
            compose(*overrides, "precision=int8", "precision.gate.min_cosine=1"), layout
        )
    line = str(failed.value)
    assert "accuracy gate failed for int8 ONNX on RANDOM inputs (no model.reference_data)" in line
    assert line.endswith("give real inputs with model.reference_data before trusting this gate")
    capfd.readouterr()
    stages.calibrate(compose(*overrides, "precision=fp32"), layout)
    table = " ".join(capfd.readouterr().err.split())
    assert "accuracy gate passed, on RANDOM inputs (no model.reference_data)" in table
    # random inputs judge direction (cosine), not magnitude: an absolute-error threshold
    # int8 cannot meet is left out, and says nothing in the gate
    summary = stages.calibrate(
        compose(*overrides, "precision=int8", "precision.gate.max_abs_error=0"), layout
    )
    assert summary["gate_passed"]
    assert {r["metric"] for r in summary["gate"]} == {"cosine"}  # a dense map: rel_error left out


@pytest.mark.parametrize("model", ["cnn", "transformer", "outlier_bert", "outlier_transformer"])
def test_auto_runs_on_every_bundled_model(model, tmp_path):
    layout = Layout(tmp_path)
    cfg = compose(
        f"model={model}",
        "precision=auto",
        "precision.objective=weight_bytes",
        f"calibration.cache_dir={tmp_path / 'c'}",
    )
    stages.export(cfg, layout)
    summary = stages.calibrate(cfg, layout)
    assert summary["gate_passed"] and summary["mixed"]["counts"]["fp32"] == 0


def test_auto_runs_on_a_paddle_classifier_from_its_wheel(tmp_path):
    """PP-OCR's angle classifier (rapidocr wheel, 53 convolutions, `-1` batch) on rendered
    text lines, upright and turned: the search mixes types under the default gate."""
    from tests.wild import fetch, inputs

    try:
        cls = fetch.rapidocr()["cls"]
    except fetch.FetchError as e:
        pytest.skip(str(e))
    inputs.write_npz_folder(tmp_path / "cal", "x", inputs.cls_batches(2, 8, 1))
    inputs.write_npz_folder(tmp_path / "ref", "x", inputs.cls_batches(1, 8, 2))
    cfg = compose(
        "model=onnx_file",
        f"model.onnx_path={cls}",
        "profile.shapes={x: [1x3x48x192, 8x3x48x192, 16x3x48x192]}",
        f"model.reference_data={tmp_path / 'ref'}",
        "calibration=directory",
        f"calibration.path={tmp_path / 'cal'}",
        f"calibration.cache_dir={tmp_path / 'c'}",
        "precision=auto",
        "precision.objective=weight_bytes",  # by engine bytes it answers fp16: 53 small convs
    )
    layout = Layout(tmp_path / "run")
    stages.export(cfg, layout)
    summary = stages.calibrate(cfg, layout)
    record = summary["mixed"]
    assert summary["gate_passed"] and record["candidates"] >= 50
    assert record["counts"]["int8"] > 0 and record["weight_bytes"] < record["fp32_weight_bytes"] / 3
