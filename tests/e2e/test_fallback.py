"""The issue's "done when", for real: `dvc exp run` on the outlier transformer passes int8
with precision.fallback=auto (report with the sensitivity table) and fails without it, naming
every failing metric with metrics/accuracy.json written; a new sample_dims key needs no `+`
(DVC loads hydra_plugins/trt_pipeline from the repository root)."""

import json

import numpy as np
import pytest

from tests.helpers import DVC_FAST as FAST
from tests.helpers import dvc

pytestmark = pytest.mark.e2e

OUTLIER_INT8 = ["-S", "model=outlier_transformer", "-S", "precision=int8"]


def test_dvc_exp_run_with_and_without_fallback(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    dvc(
        repo,
        "exp",
        "run",
        *OUTLIER_INT8,
        "-S",
        "precision.fallback=auto",
        "-S",
        "model.sample_dims={batch: 8, seq: 32, extra: 1}",
        "-S",
        "benchmark.backends=[onnxruntime]",
        *FAST,
    )
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    fb = metrics["fallback"]
    assert (
        metrics["gate_passed"]
        and fb["needed"]
        and 2 * fb["matmuls_still_quantized"] >= fb["quantized_matmuls"]
    )
    report = (repo / "artifacts/inspect/report.md").read_text()
    assert "sensitivity (gate score added when quantized alone)" in report
    assert (
        f"{fb['matmuls_still_quantized']} of {fb['quantized_matmuls']} matrix multiplies" in report
    )

    failed = dvc(
        repo, "exp", "run", *OUTLIER_INT8, "-S", "precision.fallback=none", *FAST, check=False
    )
    assert failed.returncode != 0
    line = next(
        x for x in failed.stderr.splitlines() if x.startswith("error: accuracy gate failed")
    )
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    assert metrics["gate_passed"] is False and len(metrics["failing"]) == 2
    for r in metrics["failing"]:
        assert f"{r['metric']} of output 'embedding' (embedding) is" in line


def readme_command(section: str) -> list[str]:
    """The first `dvc exp run` of a README section, continuation lines joined."""
    import shlex

    from tests.conftest import REPO

    text = (REPO / "README.md").read_text().split(section, 1)[1]
    block = text[text.index("    dvc exp run") :].split("\n\n", 1)[0]
    return shlex.split(block.replace("\\\n", " "))


def test_readme_your_own_model_as_written(in_tmp_repo_copy):
    """The outlier transformer as the user's ONNX file, a calibration folder and a reference
    folder of tokenized "sentences", then the README's command, unchanged."""
    import shutil

    from pipeline.core import fileio
    from pipeline.core.layout import Layout
    from pipeline.flow import stages
    from pipeline.zoo import outlier_transformer
    from tests.conftest import compose

    repo = in_tmp_repo_copy
    stages.export(compose("model=outlier_transformer"), Layout(repo / "scratch"))
    (repo / "path/to").mkdir(parents=True)
    shutil.copy(repo / "scratch/artifacts/export/model.onnx", repo / "path/to/model.onnx")
    shutil.rmtree(repo / "scratch")
    for folder, seed in (("data/calibration/sentences", 21), ("data/reference/sentences", 22)):
        batches = list(outlier_transformer.calibration_batches(32, 8, seed=seed, seq=128))
        fileio.write_npz(
            repo / folder / "tokens.npz",
            {k: np.concatenate([b[k] for b in batches]) for k in batches[0]},
        )
    command = readme_command("### Your own model")
    assert command[:3] == ["dvc", "exp", "run"]
    dvc(repo, *command[1:])
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    assert metrics["gate_passed"] and metrics["reference_inputs"]["source"] == "folder"
    # the search judged 24 of the 32 sentences; the verdict is on the other 8
    assert metrics["holdout"]["search_samples"] + metrics["holdout"]["verdict_samples"] == 32
    assert metrics["accuracy"]["embedding"]["rows"] == metrics["holdout"]["verdict_samples"]
    bench = json.loads((repo / "metrics/benchmark.json").read_text())
    assert (
        bench["inputs"]["reference"]["source"] == "folder"
        and bench["inputs"]["from_reference_data"]
    )
