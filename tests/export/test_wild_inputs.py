"""Models as their owners export them (tests/wild/graphs.py), through the export and
calibrate steps: every failure class of issue 28 is one line or works."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.inputs import calibration_data, samples
from tests.conftest import compose
from tests.wild import fetch, graphs


def wild(tmp_path: Path, name: str, *overrides: str, **kwargs) -> tuple:
    path = getattr(graphs, name)(tmp_path / f"{name}.onnx", **kwargs)
    cfg = compose(
        "model=onnx_file",
        f"model.onnx_path={path}",
        f"model.source={path}",
        f"calibration.cache_dir={tmp_path / 'cache'}",
        *overrides,
    )
    return cfg, Layout(tmp_path / "run")


def exported(layout: Layout) -> dict:
    return json.loads((layout.export_dir / "export.json").read_text())


def test_a_scalar_that_picks_a_branch_is_never_drawn_at_random(tmp_path):
    cfg, layout = wild(tmp_path, "if_sample_rate")
    with pytest.raises(PipelineError) as e:
        stages.export(cfg, layout)
    line = str(e.value)
    assert "'sr' (int64, rank 0) is read by Equal" in line and "\n" not in line
    assert "model.constant_inputs.sr" in line and "model.input_ranges.sr" in line
    assert not layout.export_dir.exists()


def test_a_frozen_input_folds_the_if_away_and_the_reference_takes_its_branch(tmp_path):
    cfg, layout = wild(tmp_path, "if_sample_rate", "model.constant_inputs.sr=16000")
    summary = stages.export(cfg, layout)
    model = onnx.load(str(layout.export_dir / "model.onnx"))
    assert [i.name for i in model.graph.input] == ["x"]
    assert not [n for n in model.graph.node if n.op_type in ("If", "Equal")]
    assert any("froze input(s) sr=16000" in c for c in summary["normalized"])
    ref = np.load(layout.export_dir / "reference.npz")
    x, y = ref["in::0::x"], ref["out::0::y"]
    assert (y >= 0).all() and np.abs(y).max() > 0  # the relu branch, sr == 16000
    assert x.shape[0] == 8  # the profile's opt batch
    # and the folded graph is what every later step runs: fp16 passes its gate
    stages.calibrate(compose(*cfg_overrides(cfg), "precision=fp16"), layout)


def cfg_overrides(cfg) -> list[str]:
    return [
        "model=onnx_file",
        f"model.onnx_path={cfg.model.onnx_path}",
        f"model.source={cfg.model.source}",
        "model.constant_inputs.sr=16000",
        f"calibration.cache_dir={cfg.calibration.cache_dir}",
    ]


def test_a_bounded_scalar_goes_through_autocast_whole(tmp_path):
    """AutoCast got the first reference batch as one .npz, which it split along axis 0 of a
    rank-0 input (IndexError); and a 0-d array was written as rank 1."""
    cfg, layout = wild(
        tmp_path, "if_sample_rate", "model.input_ranges.sr=[16000,16001]", "precision=fp16"
    )
    stages.export(cfg, layout)
    assert np.load(layout.export_dir / "reference.npz")["in::0::sr"].shape == ()
    assert stages.calibrate(cfg, layout)["gate_passed"]


def test_recurrent_state_counts_samples_on_its_batch_axis(tmp_path):
    cfg, layout = wild(tmp_path, "lstm", "precision=fp16", "calibration=random")
    stages.export(cfg, layout)
    assert exported(layout)["samples"]["axes"] == {"x": 0, "h": 1, "c": 1}
    assert stages.calibrate(cfg, layout)["gate_passed"]
    data = calibration_data.load(cfg.calibration, cfg.model, layout.export_dir / "model.onnx")
    assert {samples.count(b, data.axes) for b in data.batches} == {8}
    assert data.batches[0]["h"].shape == (1, 8, 32) and data.info["inputs"]["h"]["shape"][1] == "N"


def test_an_unnamed_batch_is_listed_and_the_pasted_shapes_work(tmp_path):
    cfg, layout = wild(tmp_path, "unnamed_batch")
    with pytest.raises(PipelineError, match=r"'x' \[\?, 3, 48, 192\] \(no range for axis 0\)"):
        stages.export(cfg, layout)
    given = "profile.shapes={x: [1x3x48x192, 4x3x48x192, 8x3x48x192]}"
    cfg, layout = wild(tmp_path, "unnamed_batch", given, "precision=int8", "calibration=random")
    stages.export(cfg, layout)
    assert np.load(layout.export_dir / "reference.npz")["in::0::x"].shape == (4, 3, 48, 192)
    stages.calibrate(cfg, layout)  # ModelOpt, which compares dims by name or number


def test_question_mark_dims_are_named_per_axis_so_they_need_not_agree(tmp_path):
    shapes = "profile.shapes={a: [1x16, 3x16, 8x16], b: [1x16, 5x16, 8x16]}"
    cfg, layout = wild(tmp_path, "question_dims", shapes, "model.sample_axis={b: null}")
    stages.export(cfg, layout)
    dims = {i["name"]: i["dims"] for i in exported(layout)["inputs"]}
    assert dims == {"a": ["a:0", 16], "b": ["b:0", 16]}


def test_annotations_that_mislead_onnx_runtime_are_dropped(tmp_path):
    """jax2tf wrote `unk` for two sizes; ONNX Runtime cannot run the file as given."""
    cfg, layout = wild(tmp_path, "jax_unk", "profile.shapes={x: [1x8, 3x8, 8x8]}", "precision=fp16")
    summary = stages.export(cfg, layout)
    assert "cannot run the file as given" in summary["reference"]["truth"]
    assert any("shape annotations dropped" in c for c in summary["normalized"])
    assert stages.calibrate(cfg, layout)["gate_passed"]


def test_a_graph_onnx_runtime_quantized_is_refused_pointing_at_its_original(tmp_path):
    cfg, layout = wild(tmp_path, "dynamic_quant")
    with pytest.raises(PipelineError, match=r"was quantized by ONNX Runtime \(.*MatMulInteger"):
        stages.export(cfg, layout)


def test_paddle_dims_with_dots_size_from_one_statement(tmp_path):
    cfg, layout = wild(
        tmp_path, "p2o_dims", "profile.shapes={x: [1x3x32x32, 2x3x32x256, 8x3x32x1024]}"
    )
    stages.export(cfg, layout)
    assert exported(layout)["samples"]["shapes"] == {"x": [2, 3, 32, 256]}


VAD_SHAPES = "profile.shapes={input: [1x512, 2x512, 4x512], state: [2x1x128, 2x2x128, 2x4x128]}"


def test_a_frozen_sample_rate_keeps_every_output_of_silero_vad(tmp_path, monkeypatch):
    """Silero VAD as its wheel ships it: freezing `sr` folds the top If and the Ifs nested
    in the branch it takes, and `stateN`, made inside that branch, is still an output
    (ONNX-GraphSurgeon's If flattening left it without a producer). fp32 and int8 run in a
    working folder that stays empty: ModelOpt and ONNX Runtime's symbolic shape inference
    write temporary files into the working directory, and leave them there on failure."""
    try:
        vad = fetch.silero_vad()["vad"]
    except fetch.FetchError as e:
        pytest.skip(str(e))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    common = (
        "model=onnx_file",
        f"model.onnx_path={vad}",
        VAD_SHAPES,
        "model.constant_inputs.sr=16000",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = Layout(tmp_path / "run")
    summary = stages.export(compose(*common), layout)
    model = onnx.load(str(layout.export_dir / "model.onnx"))
    assert [i.name for i in model.graph.input] == ["input", "state"]
    assert [o.name for o in model.graph.output] == ["output", "stateN"]
    assert any("2 If node(s) replaced by the branch they take" in c for c in summary["normalized"])
    fp32 = stages.calibrate(compose(*common), layout)
    assert fp32["gate_passed"] and set(fp32["accuracy"]) == {"output", "stateN"}
    int8 = compose(
        *common,
        "precision=int8",
        "calibration=random",
        "precision.gate.max_rel_error=0.5",
        "precision.gate.min_cosine=0.99",
    )
    assert set(stages.calibrate(int8, layout)["accuracy"]) == {"output", "stateN"}
    # fp16: AutoCast names its casts of a captured tensor after the tensor, and the LSTM's
    # Ifs capture one state in both branches (precision/autocast/captures.py)
    fp16 = stages.calibrate(compose(*common, "precision=fp16"), layout)
    assert fp16["gate_passed"] and set(fp16["accuracy"]) == {"output", "stateN"}
    assert not list(cwd.iterdir())
