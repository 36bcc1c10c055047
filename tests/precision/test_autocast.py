"""fp16/bf16 AutoCast (real ModelOpt) behind the calibration cache: a second cast of the
same graph, data and settings is a hit with the same bytes and imports no ModelOpt; any
setting that changes the cast changes the key."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from pipeline.core import fileio
from pipeline.core.layout import Layout
from pipeline.flow import stages
from tests.conftest import REPO, compose


@pytest.fixture(scope="module")
def fp16_runs(built_cnn, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("autocast")
    layout = Layout(tmp)
    shutil.copytree(built_cnn[1].export_dir, layout.export_dir)
    cfg = compose("model=cnn", "precision=fp16", f"calibration.cache_dir={tmp / 'cache'}")
    cold = stages.calibrate(cfg, layout)
    cold_bytes = (layout.calibrate_dir / "model.onnx").read_bytes()
    warm = stages.calibrate(cfg, layout)
    return tmp, layout, cold, warm, cold_bytes


def test_a_second_cast_is_a_hit_with_the_same_graph(fp16_runs):
    _, layout, cold, warm, cold_bytes = fp16_runs
    assert (
        cold["autocast"]["cache"]["hit"] is False
        and cold["autocast"]["low_precision_type"] == "fp16"
    )
    assert warm["autocast"]["cache"] == {"key": cold["autocast"]["cache"]["key"], "hit": True}
    assert (layout.calibrate_dir / "model.onnx").read_bytes() == cold_bytes
    assert warm["ops"].get("Cast", 0) > 0 and all(g["passed"] for g in warm["gate"])
    assert (
        fileio.read_json(layout.calibrate_dir / "calibration.json")["autocast"]["cache"]["hit"]
        is True
    )


def test_a_setting_that_changes_the_cast_misses(fp16_runs):
    tmp, layout, cold, _, _ = fp16_runs
    cfg = compose(
        "model=cnn",
        "precision=fp16",
        "precision.keep_fp32_op_types=[Conv]",
        f"calibration.cache_dir={tmp / 'cache'}",
    )
    other = stages.calibrate(cfg, layout)
    assert other["autocast"]["cache"]["hit"] is False
    assert other["autocast"]["cache"]["key"] != cold["autocast"]["cache"]["key"]


def test_a_hit_imports_no_modelopt(fp16_runs):
    tmp, layout, _cold, _, _ = fp16_runs
    probe = (
        "import json, sys\n"
        "from pathlib import Path\nfrom pipeline.flow import stages\nfrom pipeline.core.layout import Layout\nfrom tests.conftest import compose\n"
        f"cfg = compose('model=cnn', 'precision=fp16', 'calibration.cache_dir={tmp / 'cache'}')\n"
        f"s = stages.calibrate(cfg, Layout(Path({str(layout.root)!r})))\n"
        "print(json.dumps({'hit': s['autocast']['cache']['hit'],"
        " 'modelopt': any(m.split('.')[0] == 'modelopt' for m in sys.modules)}))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.splitlines()[-1]) == {"hit": True, "modelopt": False}


def test_an_onnx_runtime_failure_on_a_transformed_graph_names_the_transform_and_node():
    from pipeline.precision.gate import judging

    ort = (
        "ONNX Runtime failed to run model.onnx: [ONNXRuntimeError] : 1 : FAIL : Non-zero status "
        "code returned while running Concat node. Name:'/model.22/Concat_3' Status Message: "
        "Shape mismatch attempting to re-use buffer. {1,18,2100} != {1,64,2100}"
    )
    made = judging.made_by(compose("precision=fp16").precision)
    line = judging.transformed_failure(ort, made)
    assert line.startswith("ONNX Runtime cannot run the graph AutoCast (fp16) made from the")
    assert "at node '/model.22/Concat_3'" in line and "model.onnx" not in line
    assert "precision.keep_fp32_nodes=[/model.22/Concat_3]" in line
