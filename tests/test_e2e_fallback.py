"""The issue's "done when", for real: `dvc exp run` on the outlier transformer passes int8
with precision.fallback=auto (report with the sensitivity table) and fails without it, naming
every failing metric with metrics/accuracy.json written; a new sample_dims key needs no `+`
(DVC loads hydra_plugins/trt_pipeline from the repository root)."""

import json

import pytest

from tests.test_e2e_dvc import FAST, dvc

pytestmark = pytest.mark.e2e

OUTLIER_INT8 = ["-S", "model=outlier_transformer", "-S", "precision=int8"]


def test_dvc_exp_run_with_and_without_fallback(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    dvc(repo, "exp", "run", *OUTLIER_INT8, "-S", "precision.fallback=auto",
        "-S", "model.sample_dims={batch: 8, seq: 32, extra: 1}", *FAST)
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    fb = metrics["fallback"]
    assert metrics["gate_passed"] and fb["needed"] and 2 * fb["matmuls_still_quantized"] >= fb["quantized_matmuls"]
    report = (repo / "artifacts/inspect/report.md").read_text()
    assert "sensitivity (gate score added when quantized alone)" in report
    assert f"{fb['matmuls_still_quantized']} of {fb['quantized_matmuls']} matrix multiplies" in report

    failed = dvc(repo, "exp", "run", *OUTLIER_INT8, "-S", "precision.fallback=none", *FAST, check=False)
    assert failed.returncode != 0
    line = next(x for x in failed.stderr.splitlines() if x.startswith("error: accuracy gate failed"))
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    assert metrics["gate_passed"] is False and len(metrics["failing"]) == 2
    for r in metrics["failing"]:
        assert f"{r['metric']} of output 'embedding' is" in line
