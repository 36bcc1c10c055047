"""metrics/summary.json is the one DVC metrics file: flat, numeric, a few columns per
experiment however many shapes, outputs or backends a run has."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys

import pytest

from pipeline.report.benchmark import headline
from pipeline.report.pictures import plots

ACCURACY = {
    "gate_passed": True,
    "accuracy": {
        "a": {
            "max_abs_error": 0.1,
            "mean_rel_error": 0.01,
            "cosine": 0.99,
            "top1_agreement": 1.0,
            "finite": True,
        },
        "b": {
            "max_abs_error": 0.3,
            "mean_rel_error": 0.02,
            "cosine": 0.98,
            "top1_agreement": 0.9,
            "finite": True,
        },
    },
}
MANIFEST = {"engine": {"bytes": 3 * 2**20}, "build_seconds": 4.5}
BENCH = {
    "results": {
        "onnxruntime": {
            "status": "ok",
            "median_ms": 1.0,
            "p99_ms": 2.0,
            "throughput_per_s": 800.0,
            "label": "ONNX Runtime",
        },
        "tensorrt": {"status": "skipped", "reason": "no GPU"},
    }
}


def test_summary_is_flat_numeric_and_takes_the_worst_output():
    s = headline.summarize(ACCURACY, {"passed": False}, MANIFEST, BENCH)
    assert s == {
        "engine_mib": 3.0,
        "build_s": 4.5,
        "accuracy_gate_pass": 1,
        "build_gates_pass": 0,
        "worst_max_abs_error": 0.3,
        "worst_mean_rel_error": 0.02,
        "worst_cosine": 0.98,
        "worst_top1_agreement": 0.9,
        "onnxruntime_median_ms": 1.0,
        "onnxruntime_p99_ms": 2.0,
        "onnxruntime_throughput_per_s": 800.0,
    }


def test_plots_are_static_svg_with_nothing_from_the_network():
    rows = [
        {"series": k, "batch": b, "latency_ms": b * f, "throughput_per_s": 1e3 / f}
        for k, f in (("onnxruntime", 1.0), ("torch", 2.0))
        for b in (1, 8, 32)
    ]
    for kind in plots.CHARTS:
        svg = plots.svg(rows, kind, "cnn, fp32")
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg
        assert not re.search(r"<script|@import|(src|href)=\"https?://", svg)
        assert svg == plots.svg(rows, kind, "cnn, fp32"), "same numbers, same bytes (a DVC output)"


def _dvc(repo, *args):
    r = subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=repo, capture_output=True, text=True
    )
    assert r.returncode == 0, f"dvc {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.mark.e2e
def test_three_experiments_fit_dvc_exp_show(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    fast = [
        "-S",
        "benchmark.min_duration_s=0.2",
        "-S",
        "benchmark.warmup_s=0.05",
        "-S",
        "benchmark.min_iterations=20",
        "-S",
        "benchmark.batch_sizes=[8]",
    ]
    for i, extra in enumerate(
        (
            ["-S", "precision=fp32"],
            ["-S", "precision=fp16"],
            ["-S", "precision=fp16", "-S", "benchmark.batch_sizes=[1,8]"],
        )
    ):
        _dvc(repo, "exp", "run", "-n", f"e{i}", *fast, *extra)
    params = {"precision.name", "model.name"}
    rows = list(csv.DictReader(io.StringIO(_dvc(repo, "exp", "show", "--csv"))))
    header = list(rows[0])
    show_json = json.loads(_dvc(repo, "exp", "show", "--json"))
    metric_cols = set()
    for commit in show_json:
        for exp in [
            commit,
            *[e for x in commit.get("experiments") or [] for e in x.get("revs", [])],
        ]:
            for file, m in ((exp.get("data") or {}).get("metrics") or {}).items():
                assert file == "metrics/summary.json", f"{file} is a metrics file"
                for k, v in m.get("data", {}).items():  # the baseline commit has no metrics yet
                    assert isinstance(v, (int, float)) and not isinstance(v, bool), f"{k}={v!r}"
                    metric_cols.add(k)
    assert 8 <= len(metric_cols) <= 25, sorted(metric_cols)
    assert metric_cols <= set(header) and not params & metric_cols
    exps = [r for r in rows if r["Experiment"] in ("e0", "e1", "e2")]
    assert len(exps) == 3
    for r in exps:
        for c in metric_cols:
            assert r[c] == "" or float(r[c]) == float(r[c]), f"{c}={r[c]!r}"
    diff = _dvc(repo, "metrics", "diff", "e0", "e1")
    assert max(len(line) for line in diff.splitlines()) <= 160 and len(diff.splitlines()) <= 30
    # diff takes experiment names: each one's report.json comes from its dvc.lock and the DVC cache
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "diff", "e0", "e1", "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert (result["a"]["precision"], result["b"]["precision"]) == ("fp32", "fp16")
