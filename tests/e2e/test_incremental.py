"""Builds that are never stale: a model file outside the repository (with external
weights), calibration data and every layer of code are DVC dependencies of exactly the
stages that use them; `python -m pipeline status` answers "current on this machine?";
an output made from other params is refused downstream."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import dvc, ran_stages, write_model_with_external_data

pytestmark = pytest.mark.e2e


def pipeline(repo, *args, check=True):
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=repo, capture_output=True, text=True
    )
    if check:
        assert r.returncode == 0, r.stderr
    return r


def engine_sha(repo):
    fp = json.loads((repo / "artifacts/fingerprint.json").read_text())
    return json.loads((repo / "artifacts/build" / fp["id"] / "manifest.json").read_text())[
        "engine"
    ]["sha256"]


def stale(repo):
    r = pipeline(repo, "status", "--json", check=False)
    return r.returncode, [s["stage"] for s in json.loads(r.stdout)["stale"]]


def test_outside_model_weights_code_and_status(in_tmp_repo_copy, tmp_path):
    repo = in_tmp_repo_copy
    outside = tmp_path / "outside"
    outside.mkdir()
    onnx_path, weights = write_model_with_external_data(outside)
    pipeline(
        repo,
        "params",
        "model=onnx_file",
        f"model.onnx_path={onnx_path}",
        f"model.source={outside}",
        "benchmark.min_duration_s=0.2",
        "benchmark.warmup_s=0.05",
        "benchmark.min_iterations=10",
    )
    first = dvc(repo, "repro")
    assert ran_stages(first.stdout)[:4] == ["fingerprint", "export", "calibrate", "build"]
    assert stale(repo) == (0, [])
    before = engine_sha(repo)

    # One weight of the external-data file, changed in place.
    data = bytearray(weights.read_bytes())
    data[:4] = np.float32(7.5).tobytes()
    weights.write_bytes(bytes(data))
    # export reads the file; calibrate depends on its folder too (a task metric of the
    # user's may live there); DVC reruns everything downstream of them
    assert stale(repo) == (1, ["export", "calibrate"])
    verdict = pipeline(
        repo,
        "verify",
        f"artifacts/build/{json.loads((repo / 'artifacts/fingerprint.json').read_text())['id']}",
        check=False,
    )
    assert verdict.returncode == 1 and "model" in verdict.stdout + verdict.stderr
    again = dvc(repo, "repro")
    assert ran_stages(again.stdout) == [
        "fingerprint",
        "export",
        "calibrate",
        "build",
        "inspect",
        "benchmark",
        "package",
    ]
    assert engine_sha(repo) != before
    assert stale(repo) == (0, [])

    # Code: each layer folder reruns exactly the stages that import it. The fingerprint
    # stage has no code deps (it always runs; status compares its identity itself).
    expect = {
        "core": ["export", "calibrate", "build", "inspect", "benchmark", "package"],
        "machine": ["calibrate", "build", "inspect", "benchmark"],
        "export": ["export", "calibrate", "build", "inspect", "benchmark"],
        "precision": ["calibrate", "build", "benchmark"],
        # calibrate measures engines (the fp16 and fp32 ones of its graph) with the builder
        "engine": ["calibrate", "build", "inspect", "benchmark", "package"],
        "serve": ["package"],
        "analysis": ["build", "inspect"],
        "bench": ["benchmark"],
        "report": ["inspect", "benchmark"],
    }
    for layer, stages in expect.items():
        init = repo / "pipeline" / layer / "__init__.py"
        original = init.read_text()
        init.write_text(original + "# edited\n")
        assert stale(repo) == (1, stages), layer
        init.write_text(original)
    assert stale(repo) == (0, [])


def test_a_failed_calibrate_leaves_nothing_current(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    pipeline(repo, "params")
    for stage in ("fingerprint", "export", "calibrate", "build"):
        subprocess.run(
            [sys.executable, "-m", f"stages.{stage}"], cwd=repo, check=True, capture_output=True
        )
    pipeline(
        repo, "params", "precision=int8", "calibration=cnn_samples", "calibration.path=nowhere"
    )
    bad = subprocess.run(
        [sys.executable, "-m", "stages.calibrate"], cwd=repo, capture_output=True, text=True
    )
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert not (repo / "artifacts/calibrate").exists()
    build = subprocess.run(
        [sys.executable, "-m", "stages.build"], cwd=repo, capture_output=True, text=True
    )
    assert build.returncode == 1
    assert build.stderr.strip().count("\n") == 0 and "calibrate stage" in build.stderr, build.stderr
    bench = subprocess.run(
        [sys.executable, "-m", "stages.benchmark"], cwd=repo, capture_output=True, text=True
    )
    assert bench.returncode == 1 and "rerun the" in bench.stderr, bench.stderr


def test_stage_refuses_an_output_made_from_other_params(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    pipeline(repo, "params")
    for stage in ("fingerprint", "export"):
        subprocess.run(
            [sys.executable, "-m", f"stages.{stage}"], cwd=repo, check=True, capture_output=True
        )
    pipeline(repo, "params", "model.num_reference_batches=3")
    r = subprocess.run(
        [sys.executable, "-m", "stages.calibrate"], cwd=repo, capture_output=True, text=True
    )
    assert r.returncode == 1
    assert "model.num_reference_batches" in r.stderr and "rerun the export stage" in r.stderr
