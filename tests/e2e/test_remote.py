"""Engines travel through a DVC remote; a clone rebuilds only when its machine
fingerprint differs, and a machine that comes back gets its engine without a build."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ran_stages

pytestmark = pytest.mark.e2e

FAKE_H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "compute_capability": "9.0",
    "memory_mib": 81559,
    "_driver": "580.65.06",
    "_cuda_driver": "13.0",
}


def sh(repo, *cmd, env=None):
    r = subprocess.run(list(cmd), cwd=repo, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    return r


def ran(r):
    return ran_stages(r.stdout)


def engine_dirs(repo):
    return sorted(p.name for p in (repo / "artifacts/build").iterdir())


def test_push_pull_between_clones_and_fingerprint_changes(in_tmp_repo_copy, tmp_path):
    one = in_tmp_repo_copy
    env1 = {**os.environ, "TRT_PIPELINE_STORE": str(tmp_path / "store1")}
    env2 = {**os.environ, "TRT_PIPELINE_STORE": str(tmp_path / "store2")}
    dvc = [sys.executable, "-m", "dvc"]
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    sh(
        one,
        sys.executable,
        "-m",
        "pipeline",
        "params",
        "benchmark.min_duration_s=0.2",
        "benchmark.warmup_s=0.05",
    )
    sh(one, *dvc, "remote", "add", "-d", "shared", str(tmp_path / "remote"))
    sh(one, *dvc, "repro", env=env1)
    sh(one, *git, "add", "-A")
    sh(one, *git, "commit", "-qm", "built")
    sh(one, *dvc, "push", env=env1)

    two = tmp_path / "two"
    sh(tmp_path, "git", "clone", "-q", str(one), str(two))
    sh(two, *dvc, "pull", env=env2)
    [fp_dir] = engine_dirs(two)
    manifest = json.loads((two / "artifacts/build" / fp_dir / "manifest.json").read_text())
    same = sh(two, *dvc, "repro", env=env2)
    assert ran(same) == ["fingerprint"], (
        same.stdout
    )  # same machine kind: the pulled engine is current
    assert "engine store" not in same.stderr
    assert json.loads((two / "artifacts/fingerprint.json").read_text())["id"] == fp_dir

    fake = tmp_path / "h100.json"
    fake.write_text(json.dumps(FAKE_H100))
    other = sh(two, *dvc, "repro", env={**env2, "TRT_PIPELINE_GPU_PROBE": str(fake)})
    assert "build" in ran(other) and "engine store miss, built" in other.stderr
    # Each machine's folder sits beside the others: engines for every GPU travel together.
    [h100_dir] = [d for d in engine_dirs(two) if d != fp_dir]
    assert h100_dir.startswith("nvidia-h100") and engine_dirs(two) == sorted([fp_dir, h100_dir])
    h100_manifest = json.loads((two / "artifacts/build" / h100_dir / "manifest.json").read_text())
    assert h100_manifest["fingerprint"]["gpu"]["compute_capability"] == "9.0"
    assert h100_manifest["cache_key"] != manifest["cache_key"]

    back = sh(two, *dvc, "repro", env=env2)
    assert "engine store miss" not in back.stderr, back.stderr  # restored, not rebuilt
    assert "adopted the engine DVC restored" in back.stderr
    restored = two / "artifacts/build" / fp_dir / "engine.plan"
    assert json.loads((two / "artifacts/build" / fp_dir / "manifest.json").read_text()) == manifest
    import hashlib

    assert hashlib.sha256(restored.read_bytes()).hexdigest() == manifest["engine"]["sha256"]
