"""`python -m pipeline diff A B` on real builds: fp32 against fp16 (and int8) of the CNN."""

import json
import subprocess
import sys

import pytest

from pipeline.analysis import diff
from pipeline.core.errors import PipelineError
from pipeline.flow import stages
from pipeline.records import inspect_file
from pipeline.report.inspect import report
from tests.conftest import REPO


def _engine_dir(built):
    _, layout = built
    return layout.engine_dir(stages.read_fingerprint(layout)["id"])


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "diff", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )


def test_fp16_against_fp32_narrows_layers(built_cnn, built_cnn_fp16):
    d = diff.compare(diff.load(_engine_dir(built_cnn)), diff.load(_engine_dir(built_cnn_fp16)))
    assert d["a"]["precision"] == "fp32" and d["b"]["precision"] == "fp16"
    conv = next(
        c for c in d["precision_changes"] if c["layer"] == "/features/features.0/features.0.0/Conv"
    )
    assert conv == {
        "layer": "/features/features.0/features.0.0/Conv",
        "a": "fp32",
        "b": "fp16",
        "change": "narrower",
    }
    assert not any(c["change"] == "wider" for c in d["precision_changes"])
    assert d["network_precisions"]["b"]["fp16"] > 0 and "fp16" not in d["network_precisions"]["a"]
    m = d["metrics"]
    assert m["engine_bytes"]["change"] == m["engine_bytes"]["b"] - m["engine_bytes"]["a"] != 0
    assert m["weights_bytes"]["b"] < m["weights_bytes"]["a"]
    assert m["fusion_ratio"]["b"] >= m["fusion_ratio"]["a"] and d["regressions"] == []
    table = diff.format_table(d)
    assert "fusion ratio" in table and "narrower" in table and "regressions: none" in table


def test_cli_table_json_and_regression_gate(built_cnn, built_cnn_fp16):
    a, b = _engine_dir(built_cnn), _engine_dir(built_cnn_fp16)
    ok = _cli(a, b, "--fail-on-regression")
    assert (
        ok.returncode == 0
        and "engine layers" in ok.stdout
        and "ONNX compute nodes" in ok.stdout
        and ok.stderr == ""
    )
    as_json = json.loads(_cli(a, b, "--json").stdout)
    assert as_json["b"]["precision"] == "fp16" and as_json["regressions"] == []
    bad = _cli(b, a, "--fail-on-regression")  # fp32 judged against an fp16 baseline
    assert bad.returncode == 1 and "regressions: fusion ratio" in bad.stdout
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: B regresses against baseline A: fusion ratio"
    )
    assert "at a wider precision (e.g. " in lines[0] and "fp16→fp32" in lines[0]


def test_inspect_folders_and_build_parents_compare_too(built_cnn, built_cnn_fp16, tmp_path):
    cfg, layout = built_cnn_fp16
    r = report.make_report(
        layout.export_dir / "model.onnx",
        layout.calibrate_dir / "model.onnx",
        _engine_dir(built_cnn_fp16),
        cfg.inspect,
        {"available": False, "reason": "test"},
    )
    (tmp_path / "inspect").mkdir()
    inspect_file.write(tmp_path / "inspect", r)
    d = diff.compare(diff.load(built_cnn[1].build_dir), diff.load(tmp_path / "inspect"))
    assert d["a"]["kind"] == "build" and d["b"]["kind"] == "inspect" and d["layers_compared"] > 5
    assert any(c["change"] == "narrower" for c in d["precision_changes"]) and not d["regressions"]


def test_int8_against_fp32(built_cnn, built_cnn_int8):
    d = diff.compare(diff.load(_engine_dir(built_cnn)), diff.load(_engine_dir(built_cnn_int8)))
    assert d["b"]["precision"] == "int8" and d["network_precisions"]["b"].get("int8", 0) > 0
    assert d["metrics"]["weights_bytes"]["b"] < d["metrics"]["weights_bytes"]["a"]
    assert not any(c["change"] == "wider" for c in d["precision_changes"])


def test_regression_rules():
    def view(ratio, precisions, engine=None):
        return {
            "path": "x",
            "kind": "build",
            "precision": "p",
            "tensorrt": "t",
            "engine_bytes": 1,
            "build_seconds": 1.0,
            "layers_original": 10,
            "layers_final": 10 / ratio,
            "fusion_ratio": ratio,
            "peak_memory_mib": 1.0,
            "weights_bytes": 1,
            "activation_bytes": 1,
            "warnings": [],
            "engine_precisions": engine or {},
            "network_precisions": {},
            "layer_precisions": precisions,
        }

    assert diff.compare(view(5.0, {"a": "fp16"}), view(5.0, {"a": "fp16"}))["regressions"] == []
    assert diff.compare(view(5.0, {}), view(4.0, {}))["regressions"] == ["fusion ratio 5.0 → 4.0"]
    assert diff.compare(view(5.0, {"a": "int8"}), view(5.0, {"a": "fp16"}))["regressions"] == [
        "1 layer(s) at a wider precision (e.g. a int8→fp16)"
    ]
    widened = diff.compare(view(5.0, {}, {"fp16": 9}), view(5.0, {}, {"fp16": 3, "fp32": 6}))[
        "regressions"
    ]
    assert widened and widened[0].startswith("engine precision mix widened")
    with pytest.raises(
        PipelineError, match="B regresses against baseline A: fusion ratio 5.0 → 4.0"
    ):
        diff.gate(diff.compare(view(5.0, {}), view(4.0, {})))


def test_not_a_build_is_one_clear_error(tmp_path):
    with pytest.raises(PipelineError, match="neither a build folder"):
        diff.load(tmp_path)
    r = _cli(tmp_path, tmp_path / "missing")
    assert (
        r.returncode == 1
        and r.stderr.startswith("error: diff: ")
        and len(r.stderr.strip().splitlines()) == 1
    )


def test_a_summary_from_before_fusion_was_measured_has_no_ratio_to_compare(built_cnn):
    """Older summaries divided by the optimizer's Myelin region count (14 → 1 read 14.0)."""
    view = diff.load(_engine_dir(built_cnn))
    old_log = {"layers_original": 14, "layers_final": 1, "fusion_ratio": 14.0, "warnings": []}
    old = diff._view("old", "build", "fp32", "t", 1, 1.0, old_log, [], {})
    assert old["fusion_ratio"] is None and old["layers_final"] is None
    assert not any(r.startswith("fusion ratio") for r in diff.compare(old, view)["regressions"])


def test_a_report_of_another_version_is_one_line(tmp_path):
    (tmp_path / "report.json").write_text('{"precision": "fp16", "engine": {"bytes": 10}}')
    with pytest.raises(PipelineError, match=r"has no valid 'engine.backend.flavour'.*rerun the"):
        diff.load(tmp_path)
