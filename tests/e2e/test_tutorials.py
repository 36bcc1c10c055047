"""The workflow tutorials in docs/tutorials/ (your own ONNX model, sweeps, a team store,
CI), run as written: every `sh` block's command, in order, in a
fresh copy of the repository, and what each page says it does, checked. A block titled
with a file name (```python title="make_model.py") is the file the page asks the reader to
save (tests/e2e/tutorial_pages.py). The precision tutorials: test_tutorials_precision.py
and test_tutorials_int4.py; the detector: test_tutorials_detector.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.e2e.tutorial_pages import blocks, save_files, sh

pytestmark = pytest.mark.e2e


def test_own_onnx_model_tutorial(tutorial_repo):
    repo = tutorial_repo
    assert save_files("own-onnx-model.md", repo) == ["make_model.py"]
    make, fp32, int8_default_gate, int8, show, package = blocks("own-onnx-model.md")
    sh(repo, make)
    assert (repo / "mymodel/model.onnx").is_file()

    sh(repo, fp32)
    reference = np.load(repo / "artifacts/export/reference.npz")
    fed = [k for k in reference.files if k.startswith("in::") and k.endswith("::readings")]
    assert sum(reference[k].shape[0] for k in fed) == 32  # every held-out sample, no others
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    assert metrics["gate_passed"]
    assert list((repo / "artifacts/build").glob("*/engine.plan"))

    failed = sh(repo, int8_default_gate, check=False)
    assert failed.returncode != 0
    line = next(
        x for x in failed.stderr.splitlines() if x.startswith("error: accuracy gate failed")
    )
    assert "max_abs_error of output 'logits'" in line and "cosine" not in line, line
    metrics = json.loads((repo / "metrics/accuracy.json").read_text())
    used = metrics["calibration_data"]
    assert (used["source"], used["num_samples"], used["random"]) == ("directory", 64, False)
    assert metrics["gate"]["logits"]["cosine"]["passed"]

    sh(repo, int8)
    calibration = json.loads((repo / "artifacts/calibrate/calibration.json").read_text())
    assert calibration["gate_passed"] and calibration["precision"] == "int8"
    assert "int8" in sh(repo, show).stdout

    said = sh(repo, package).stdout + sh(repo, package).stderr
    folder = repo / "repository" / "mymodel"
    config = (folder / "config.pbtxt").read_text()
    assert 'name: "mymodel"' in config and "cc_model_filenames" in config
    assert "TensorRT-RTX engine" in config and "schema not checked" in said
    assert json.loads((folder / "sha256.json").read_text())["config.pbtxt"]


@pytest.mark.slow
def test_sweeps_tutorial(tutorial_repo, monkeypatch):
    import csv

    repo = tutorial_repo
    # A store of its own: the first sweep must build, whatever other tests put in the shared one.
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(repo.parent / "engines"))
    monkeypatch.setenv("TRT_PIPELINE_CALIB_CACHE", str(repo.parent / "calibration"))
    joblib_sweep, again, ray, slurm_config, submitit = blocks("sweeps.md")

    def rows(folder: str) -> list[dict]:
        return list(csv.DictReader((repo / "sweeps" / folder / "sweep_summary.csv").open()))

    sh(repo, joblib_sweep)
    first = rows("one-machine")
    assert sorted(r["precision"] for r in first) == ["fp16", "fp32"]
    assert {r["store"] for r in first} == {"built"} and {r["gates"] for r in first} == {"passed"}
    for job in ("precision=fp32", "precision=fp16"):
        assert (repo / "sweeps/one-machine" / job / "result.json").is_file()

    printed = sh(repo, again).stdout
    assert {r["store"] for r in rows("again")} == {"reused"} and "reused" in printed

    sh(repo, ray)
    ran = rows("ray")
    assert len(ran) == 2 and {r["gates"] for r in ran} == {"passed"}
    assert all((p / "ray_node.json").is_file() for p in (repo / "sweeps/ray").glob("*=*"))

    shown = sh(repo, slurm_config).stdout
    assert "partition: a100" in shown and "gpus_per_node: 1" in shown

    sh(repo, submitit)
    assert [r["store"] for r in rows("submitit")] == ["hit", "hit"]


def test_team_store_tutorial(tutorial_repo):
    repo = tutorial_repo
    folder, first, colleague = blocks("team-store.md")
    sh(repo, folder)
    store = repo.parent / "team-engines"

    built = sh(repo, first)
    assert "engine store miss, built" in built.stdout + built.stderr
    entries = list((store / "entries").iterdir())
    assert len(entries) == 1, entries
    for path in [entries[0], *entries[0].rglob("*")]:
        assert path.stat().st_mode & 0o020, f"{path} is not group-writable"

    hit = sh(repo, colleague)
    assert "engine store hit" in hit.stdout + hit.stderr
    assert str(store.resolve()) in hit.stdout or "team-engines" in hit.stdout
    assert list((store / "entries").iterdir()) == entries


def test_ci_tutorial(tutorial_repo):
    repo = tutorial_repo
    baseline, passes, stale, regression = blocks("ci.md")
    sh(repo, baseline)
    assert sh(repo, passes).returncode == 0

    r = sh(repo, stale, check=False)
    assert r.returncode == 1
    said = r.stdout.strip().splitlines()[-1]
    assert said.startswith("stale: calibrate (") and said.endswith("run dvc repro"), r.stdout

    r = sh(repo, regression, check=False)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("error: B regresses against baseline A: fusion ratio"), r.stderr
    assert "fp16→fp32" in lines[-1]
