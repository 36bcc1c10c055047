"""Sizes checked before work, and each stage's peak RSS, through the stage CLIs that
`dvc repro` runs, in a copy of the repository: a batch of a billion and a profile whose
max batch is two billion end in one line naming the setting and both byte counts."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CNN_SAMPLE = 3 * 32 * 32 * 4  # pipeline.zoo.cnn_classifier: one float32 image
CNN_OUTPUT = 10 * 4  # ten float32 logits
FAST = ("benchmark.warmup_s=0.05", "benchmark.min_duration_s=0.2", "benchmark.min_iterations=10")


def run(repo, *args):
    return subprocess.run([sys.executable, "-m", *args], cwd=repo, capture_output=True, text=True)


def ok(repo, *args):
    r = run(repo, *args)
    assert r.returncode == 0, r.stderr
    return r


def one_line_refusal(r, key: str, need: int) -> None:
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    line = lines[0]
    assert key in line and f"needs {need:,} bytes" in line, line
    have = int(re.search(r"has ([\d,]+) bytes", line).group(1).replace(",", ""))
    assert 0 < have < need


def test_a_batch_of_a_billion_is_refused_before_the_export(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    ok(repo, "pipeline", "params", "model=cnn", "model.sample_dims.batch=1000000000")
    r = run(repo, "stages.export")
    # torch's example batch is the first thing the export would make
    one_line_refusal(r, "model.sample_dims.batch=1000000000", 1_000_000_000 * CNN_SAMPLE)
    assert not (repo / "artifacts/export").exists()
    assert not list((repo / "artifacts").glob(".export*"))


def test_a_profile_max_of_two_billion_is_refused_before_the_benchmark(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    profile = "profile.profiles.0.dims.batch=[1,8,2000000000]"
    shutil.rmtree(repo / "metrics/memory", ignore_errors=True)  # the checkout's own run's
    ok(repo, "pipeline", "params", "model=cnn", profile, *FAST)
    for stage in ("fingerprint", "export", "calibrate", "build", "inspect"):
        ok(repo, f"stages.{stage}")
    r = run(repo, "stages.benchmark")
    # every benchmark point's inputs (batch 1, 8 and the max) and the largest one's outputs
    need = (1 + 8 + 2_000_000_000) * CNN_SAMPLE + 2_000_000_000 * CNN_OUTPUT
    one_line_refusal(r, "profile.profiles.0.dims.batch=[1, 8, 2000000000]", need)
    assert not (repo / "metrics/benchmark.json").exists()

    # The stages that ran recorded their peak RSS, under one key.
    fp = json.loads((repo / "artifacts/fingerprint.json").read_text())["id"]
    stages = ["export", "calibrate", "build", "inspect"]
    ok(repo, "pipeline", "params", "model=cnn", *FAST)
    # the profile is the sample inputs' too: export and calibrate run again for the new one
    for stage in ("export", "calibrate", "build", "benchmark"):
        shown = ok(repo, f"stages.{stage}")
        # the end-of-stage table shows the same figure the JSON holds
        assert re.search(r"peak RSS\s+[\d,]+ MiB", shown.stdout + shown.stderr), stage
    for stage in [*stages, "benchmark"]:
        f = f"metrics/memory/{stage}.json"
        peak = json.loads((repo / f).read_text())["peak_rss_mib"]
        # a Python interpreter holds 10 MiB or more (a store hit's build stage ~27 MiB);
        # less than the machine has
        assert 10 < peak < 1 << 20, (f, peak)
    assert (repo / "artifacts/build" / fp / "engine.plan").exists()
