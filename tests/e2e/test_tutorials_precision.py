"""The precision tutorials in docs/tutorials/ (an int8 transformer, precision=auto, a
Hugging Face transformer; int4 and streamed transforms are test_tutorials_int4.py's), run
as written, as test_tutorials.py runs the workflow ones (tests/e2e/tutorial_pages.py reads
the pages)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.tutorial_pages import blocks, commands, save_files, sh
from tests.helpers import dvc

pytestmark = pytest.mark.e2e


def test_int8_transformer_tutorial(tutorial_repo):
    repo = tutorial_repo
    plain, fallback, smoothed, show = commands("int8-transformer.md")
    assert all(c[0] == "dvc" for c in (plain, fallback, smoothed, show))

    failed = dvc(repo, *plain[1:], check=False)
    assert failed.returncode != 0
    assert any(
        line.startswith("error: accuracy gate failed for int8 ONNX: ")
        for line in failed.stderr.splitlines()
    ), failed.stderr[-2000:]
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    assert metrics["gate_passed"] is False and metrics["failing"]

    dvc(repo, *fallback[1:])
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    fb = metrics["fallback"]
    assert metrics["gate_passed"] and fb["needed"]
    assert fb["kept"] and all("/ff2/" in n for n in fb["kept"])
    report = (repo / "artifacts/inspect/report.md").read_text()
    assert f"({fb['graphs_evaluated']} graphs evaluated)" in report
    assert "group (one role in every layer)" in report and "of GEMM FLOPs run in int8" in report

    dvc(repo, *smoothed[1:])
    calibration = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    assert calibration["gate_passed"] and calibration["fallback"]["needed"] is False
    assert calibration["calibration"]["gemm_flops"]["quantized_fraction"] == 1.0

    shown = dvc(repo, *show[1:])
    assert "precision.smoothing" in shown.stdout


@pytest.mark.slow
def test_mixed_precision_tutorial(tutorial_repo, monkeypatch):
    repo = tutorial_repo
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(repo.parent / "engines"))
    int4_only, by_engine, by_weights, again = commands("mixed-precision.md")
    assert [c[:2] for c in (int4_only, by_engine, by_weights, again)] == [["dvc", "exp"]] * 3 + [
        ["dvc", "repro"]
    ]

    failed = dvc(repo, *int4_only[1:], check=False)
    assert failed.returncode != 0
    assert "accuracy gate failed for int4_awq ONNX: cosine of output 'embedding'" in failed.stderr

    # the engine's fixed part outweighs every weight: fp16 is the answer, said before a search
    ran = dvc(repo, *by_engine[1:])
    said = " ".join((ran.stdout + ran.stderr).split())
    assert "no type per GEMM can make the engine smaller than the fp16 engine" in said
    calibration = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    assert calibration["mixed"]["answer"] == "fp16" and calibration["gate_passed"]
    assert "x the fp16 engine (" in said

    ran = dvc(repo, *by_weights[1:])
    calibration = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    mixed = calibration["mixed"]
    assert calibration["gate_passed"] and not mixed["figures_cache_hit"] and "answer" not in mixed
    used = {t for t, n in mixed["counts"].items() if n}
    assert len(used) >= 2, mixed["counts"]
    singles = {g["graph"]: g for g in mixed["graphs"] if g["graph"].startswith("all ")}
    cheapest_single = min(g["weight_bytes"] for g in singles.values() if g["passed"])
    assert singles["all fp16"]["weight_bytes"] == cheapest_single
    assert mixed["weight_bytes"] <= 0.6 * cheapest_single  # "about half"
    report = (repo / "artifacts/inspect/report.md").read_text()
    assert "precision=auto: 9 GEMMs as " in report and "| all int4 |" in report
    assert (repo / "artifacts/inspect/mixed_pareto.svg").is_file()
    assert list((repo / "artifacts/build").glob("*/engine.plan"))
    # what the mix costs: an engine larger than fp16's, said in the run and the report
    said = " ".join((ran.stdout + ran.stderr).split())
    assert "warning: the auto engine is" in said and "the fp16 engine of the same graph" in said
    assert "the auto engine is" in report

    dvc(repo, *again[1:])
    rerun = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())["mixed"]
    assert rerun["search_cache_hit"] and rerun["assignment"] == mixed["assignment"]


def test_hf_transformer_tutorial(tutorial_repo, monkeypatch):
    repo = tutorial_repo
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(repo.parent / "engines"))
    assert save_files("hf-transformer.md", repo) == ["export_bert.py"]
    export, int8, auto = blocks("hf-transformer.md")
    sh(repo, export)
    graph = __import__("onnx").load(str(repo / "bert/model.onnx"))
    wheres = {n.name for n in graph.graph.node if n.op_type == "Where"}
    assert wheres  # the attention mask's, as transformers writes it

    failed = sh(repo, int8, check=False)
    assert failed.returncode != 0
    assert "accuracy gate failed for int8 ONNX: max_abs_error of output 'embedding'" in (
        " ".join(failed.stderr.split())
    )

    ran = sh(repo, auto)
    calibration = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    mixed = calibration["mixed"]
    assert calibration["gate_passed"] and not calibration["reference"]["random"]
    # the build table stands the engine against the fp16 and fp32 engines calibrate measured
    said = " ".join((ran.stdout + ran.stderr).split())
    assert "x the fp16 engine (" in said and "x the fp32 engine (" in said
    assert mixed["engine"]["prediction_held"] and mixed["engine"]["vs_fp16"] < 1
    assert mixed["candidates"] == 24 and mixed["counts"]["int4"] == 24, mixed["counts"]
    assert mixed["weight_bytes"] < 0.2 * mixed["fp32_weight_bytes"]
    written = __import__("onnx").load(str(repo / "artifacts/calibrate/model.onnx"))
    assert wheres <= {n.name for n in written.graph.node if n.op_type == "Where"}
    assert (
        "precision=auto: 24 GEMMs as 24 int4" in (repo / "artifacts/inspect/report.md").read_text()
    )
    assert list((repo / "artifacts/build").glob("*/engine.plan"))
