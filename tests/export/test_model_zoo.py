"""The classic CNNs of the ONNX model zoo as the `onnx` wheel ships them
(onnx/backend/test/data/light/: opset 9, IR 3, every weight also a graph input, static
batch 1), used as a new user would (`model=onnx_file`), through export and the precision
transform at every precision."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from pipeline.core import fileio
from pipeline.core.layout import Layout
from pipeline.flow import stages
from tests.conftest import compose

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))


def config(model: str, precision: str, *extra: str):
    return compose(
        "model=onnx_file",
        f"model.onnx_path={LIGHT / model}.onnx",
        f"model.source={LIGHT}",
        f"precision={precision}",
        "model.num_reference_batches=2",
        # the gates at every precision are the point here, not engine sizes: the fp16
        # reference (AutoCast) doubles an int8 run on DenseNet (tests/precision/test_objective.py)
        "build.reference_engines=never",
        *extra,
    )


def test_all_nine_are_there():
    assert len(MODELS) == 9, MODELS


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16", "int8"])
@pytest.mark.parametrize("model", MODELS)
def test_zoo_model_passes_its_gate(tmp_path, model, precision):
    # int8 on random data: a few samples keep the large ones (VGG, DenseNet) quick
    extra = ("calibration=random", "calibration.num_samples=4") if precision == "int8" else ()
    cfg = config(model, precision, *extra, f"calibration.cache_dir={tmp_path / 'cache'}")
    layout = Layout(tmp_path)
    exported = stages.export(cfg, layout)
    assert any("opset 9 upgraded to 13" in c for c in exported["normalized"])
    assert any("initializers taken out of the graph inputs" in c for c in exported["normalized"])
    summary = stages.calibrate(cfg, layout)
    assert summary["gate_passed"], summary["gate"]


def test_random_calibration_counts_samples_per_batch_of_the_models_own_shape(tmp_path):
    """Batch 1 is static here: 32 samples are 32 batches of one, not 4."""
    cfg = config(
        "light_squeezenet",
        "int8",
        "calibration=random",
        "calibration.num_samples=32",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = Layout(tmp_path)
    stages.export(cfg, layout)
    summary = stages.calibrate(cfg, layout)
    data = summary["calibration"]["data"]
    assert data["num_samples"] == 32 and data["num_batches"] == 32 and data["batch_size"] == 1
    # the reference is the user's own file: the normalised graph is what the transforms read
    export = fileio.read_json(layout.export_dir / "export.json")
    assert export["opset"] == 13 and export["source"] == "onnx:light_squeezenet.onnx"
