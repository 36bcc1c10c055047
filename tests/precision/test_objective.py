"""What a precision costs the user: the engine's bytes as TensorRT-RTX writes them on this
machine (real builds, no stand-in), against the fp16 and fp32 engines of the same graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pipeline.core import fileio
from pipeline.core.layout import Layout
from pipeline.flow import stages
from tests.conftest import compose


def wide_mlp(path: Path, hidden: int = 512, ffn: int = 2048) -> Path:
    """Two FFN blocks whose weights (16 MB in fp32) outweigh an engine's fixed part, as a
    real model's do; named as torch names layers, so the search groups them."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(2):
        for j, (a, b) in enumerate(((hidden, ffn), (ffn, hidden))):
            w = f"w{i}_{j}"
            weight = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
            inits.append(numpy_helper.from_array(weight, w))
            nodes.append(helper.make_node("MatMul", [x, w], [f"m{i}_{j}"], name=f"/l.{i}/fc{j}"))
            x = f"m{i}_{j}"
            if j == 0:
                nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"/l.{i}/act"))
                x = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", hidden])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def run(tmp: Path, *overrides: str, name: str = "run") -> tuple[Layout, dict, dict]:
    cfg = compose(*overrides, f"calibration.cache_dir={tmp / 'cache'}")
    layout = Layout(tmp / name)
    stages.fingerprint(cfg, layout)
    stages.export(cfg, layout)
    summary = stages.calibrate(cfg, layout)
    return layout, summary, stages.build(cfg, layout, progress=False)


WIDE = (
    "model=onnx_file",
    "profile.shapes={x: [1x512, 8x512, 16x512]}",
    "model.task=embedding",
    "precision=auto",
    "calibration.source=random",
    "calibration.num_samples=32",
    "model.num_reference_batches=8",
)


def test_auto_weighs_the_engine_and_its_prediction_holds_against_the_build(tmp_path):
    """Where weights outweigh the plan's fixed part, the search finds types whose engine is
    smaller than fp16's, predicted from builds of the single-type graphs, and the build of
    the graph it chose comes out as predicted."""
    model = wide_mlp(tmp_path / "wide.onnx")
    _, summary, built = run(tmp_path, *WIDE, f"model.onnx_path={model}")
    engine = summary["mixed"]["engine"]
    assert summary["gate_passed"] and "answer" not in summary["mixed"]
    assert engine["objective"] == "engine_bytes" and engine["prediction_held"]
    assert set(engine["single_type_engine_bytes"]) == {"int4", "fp16"}
    # the build stage's engine is the one measured, and stands below fp16's
    assert built["engine"]["bytes"] == engine["engine_bytes"]
    assert built["against"]["fp16"] < 1 and built["against"]["fp32"] < 0.5
    refs = summary["engines"]
    assert refs["fp16"]["bytes"] == engine["fp16_engine_bytes"] and refs["fp32"]["source"]


def test_auto_answers_fp16_where_no_type_per_gemm_beats_its_engine(tmp_path, capsys):
    """The bundled outlier transformer (70 k parameters): an engine's fixed part (~3 MB)
    outweighs any weight saving, so no search runs and the fp16 graph is the answer, said
    in one line."""
    over = ("model=outlier_transformer", "precision=auto")
    layout, summary, built = run(tmp_path, *over)
    mixed = summary["mixed"]
    assert summary["gate_passed"] and mixed["answer"] == "fp16"
    assert "the answer is the fp16 graph" in capsys.readouterr().err
    assert mixed["graphs_judged"] == 1 and "Cast" in summary["ops"]
    assert built["against"]["fp16"] <= 1.0  # its embedding table in fp16 too (embedding_tables.py)
    # the report says it, with the engine beside the references
    stages.inspect(compose(*over, f"calibration.cache_dir={tmp_path / 'cache'}"), layout)
    page = (layout.inspect_dir / "report.md").read_text()
    assert "precision=auto answered fp16: no type per GEMM can make the engine smaller" in page
    assert "x the fp16 engine (" in page and "x the fp32 engine (" in page


def test_a_quantized_engine_larger_than_fp16_s_is_said_in_the_run(tmp_path, capsys):
    """int8 on the bundled transformer: a plan of a few MB whose code outweighs what int8
    weights save. The build's table and record stand it against fp16 and fp32, and a line
    says it is the larger; the fp16 reference comes from the store where a precision=fp16
    run of the same graph built it."""
    run(tmp_path, "model=transformer", "precision=fp16", name="fp16")
    capsys.readouterr()
    _, summary, built = run(tmp_path, "model=transformer", "precision=int8")
    err = capsys.readouterr().err
    assert summary["engines"]["fp16"]["source"] == "store"
    assert set(built["against"]) == {"fp16", "fp32"} and built["against"]["fp16"] > 1
    assert "the int8 engine is" in err and "the fp16 engine of the same graph" in err
    assert f"{built['against']['fp16']:.2f}x the fp16 engine" in err


def test_weight_bytes_and_no_references_build_nothing(tmp_path, capsys):
    model = wide_mlp(tmp_path / "wide.onnx")
    layout, summary, built = run(
        tmp_path,
        *WIDE,
        f"model.onnx_path={model}",
        "precision.objective=weight_bytes",
        "build.reference_engines=never",
    )
    assert "engines" not in summary and "engine" not in summary["mixed"]
    assert "against" not in built
    assert "engine sizes: building" not in capsys.readouterr().err
    assert "engines" not in fileio.read_json(layout.calibration_summary)
