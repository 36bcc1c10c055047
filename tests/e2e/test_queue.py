"""Queued DVC experiments run in throw-away workspaces; with the store in the user's
cache folder (the default) their engines land where `cache ls` in the repository
finds them, and a third queued run of the same config is a store hit. `sweep-report
--dvc` over the real `dvc exp show --json` then has a row per experiment."""

import csv
import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAST = [
    "-S",
    "benchmark.min_duration_s=0.2",
    "-S",
    "benchmark.warmup_s=0.05",
    "-S",
    "benchmark.min_iterations=10",
]


def run(repo, env, *args, check=True):
    r = subprocess.run(
        [sys.executable, "-m", *args], cwd=repo, capture_output=True, text=True, env=env
    )
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    return r


def run_queue(repo, env, jobs, timeout=540):
    run(repo, env, "dvc", "queue", "start", "-j", str(jobs))
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = run(repo, env, "dvc", "queue", "status").stdout
        if not any(word in status for word in ("Queued", "Running")):
            return status
        time.sleep(3)
    run(repo, env, "dvc", "queue", "kill", "--all", check=False)
    raise AssertionError(f"the queue did not finish in {timeout} s:\n{status}")


def test_queued_experiments_share_the_user_store(in_tmp_repo_copy, tmp_path):
    repo = in_tmp_repo_copy
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TRT_PIPELINE_STORE", "TRT_PIPELINE_CALIB_CACHE")
    }
    env["XDG_CACHE_HOME"] = str(tmp_path / "user-cache")  # this test's user cache folder
    try:
        for precision in ("fp32", "fp16"):
            run(
                repo,
                env,
                "dvc",
                "exp",
                "run",
                "--queue",
                "-S",
                f"precision={precision}",
                *FAST,
                "-n",
                f"q-{precision}",
            )
        status = run_queue(repo, env, 2)
        assert status.count("Success") == 2, status
        ls = json.loads(run(repo, env, "pipeline", "cache", "ls", "--json").stdout)
        assert sorted(r["precision"] for r in ls) == ["fp16", "fp32"], ls
        store = tmp_path / "user-cache" / "trt-pipeline" / "engines"
        assert f"engine store: {store}" in run(repo, env, "pipeline", "cache", "info").stdout

        run(repo, env, "dvc", "exp", "run", "--queue", "-S", "precision=fp16", *FAST, "-n", "again")
        status = run_queue(repo, env, 1)
        assert status.count("Success") == 3, status
        logs = run(repo, env, "dvc", "queue", "logs", "again").stdout
        assert "engine store hit" in logs, logs
        assert len(json.loads(run(repo, env, "pipeline", "cache", "ls", "--json").stdout)) == 2
        assert run(repo, env, "pipeline", "cache", "verify").returncode == 0

        report = run(
            repo, env, "pipeline", "sweep-report", "--dvc", "--out", str(tmp_path / "report")
        )
        rows = {
            r["job"]: r for r in csv.DictReader((tmp_path / "report" / "sweep_summary.csv").open())
        }
        # The copy's workspace and baseline commit were never run: no metrics, no rows.
        assert sorted(rows) == ["again", "q-fp16", "q-fp32"], rows
        assert {k: (r["precision"], r["store"], r["gates"]) for k, r in rows.items()} == {
            "q-fp32": ("fp32", "built", "passed"),
            "q-fp16": ("fp16", "built", "passed"),
            "again": ("fp16", "hit", "passed"),
        }, rows
        assert all(
            float(r["median_ms"]) > 0 and r["latency_backend"] and r["acc:cosine"]
            for r in rows.values()
        )
        md = (tmp_path / "report" / "sweep_summary.md").read_text()
        assert (
            "3 job(s)" in md and all(f"| {name} |" in md for name in rows) and md in report.stdout
        )
        assert (tmp_path / "report" / "sweep_pareto.svg").read_text().lstrip().startswith("<?xml")
        assert (tmp_path / "report" / "sweep_pareto.png").stat().st_size > 1000
    finally:
        run(repo, env, "dvc", "queue", "stop", check=False)
