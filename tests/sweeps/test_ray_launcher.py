"""The Ray launcher (hydra_plugins/trt_ray_launcher) on a real local multi-node Ray
cluster: nodes advertise accelerator types and each has its own fake GPU probe (fine for
engine keys; never evidence that TensorRT ran: the engines are TensorRT-RTX CPU builds)."""

from __future__ import annotations

import contextlib
import csv
import fnmatch
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pipeline.core import locking

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402  (only once ray is known to import)

REPO = Path(__file__).resolve().parents[2]
FAST = [
    "benchmark.warmup_s=0.02",
    "benchmark.min_duration_s=0.05",
    "benchmark.min_iterations=5",
    "inspect.html=false",
    "benchmark.backends=[onnxruntime,onnxruntime_calibrated]",
    "benchmark.baseline=onnxruntime",
]
GPUS = {"A100": ("NVIDIA A100-SXM4-80GB", "8.0", 81920), "L4": ("NVIDIA L4", "8.9", 23034)}
T4 = (
    "NVIDIA T4",
    "7.5",
    15360,
)  # a node of its own, added to the module's cluster by the test that kills it


def probe(tmp: Path, kind: str) -> Path:
    name, cc, mib = {**GPUS, "T4": T4}[kind]
    p = tmp / f"probe_{kind}.json"
    p.write_text(
        json.dumps(
            {
                "name": name,
                "compute_capability": cc,
                "memory_mib": mib,
                "_driver": "580.65.06",
                "_cuda_driver": 13000,
            }
        )
    )
    return p


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = {
        kind: c.add_node(
            num_cpus=1,
            resources={f"accelerator_type:{kind}": 1},
            env_vars={"TRT_PIPELINE_GPU_PROBE": str(probe(tmp, kind))},
        )
        for kind in GPUS
    }
    c.wait_for_nodes()
    yield c, nodes
    c.shutdown()


def sweep_command(tmp: Path, address: str, *overrides: str, store: Path) -> dict:
    return {
        "args": [
            sys.executable,
            "-m",
            "pipeline.cli.run",
            "--multirun",
            "hydra/launcher=trt_ray",
            f"hydra.launcher.address={address}",
            f"hydra.sweep.dir={tmp}",
            "model=cnn",
            "build.backend=tensorrt_rtx",
            *overrides,
            *FAST,
        ],
        "cwd": REPO,
        "env": {**os.environ, "TRT_PIPELINE_STORE": str(store)},
        "text": True,
    }


def sweep(tmp: Path, address: str, *overrides: str, store: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        **sweep_command(tmp, address, *overrides, store=store), capture_output=True, timeout=600
    )


def cache(action: str, store: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "cache", action, "--store", str(store), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.e2e
def test_each_gpu_model_builds_its_own_engine_on_its_own_node_and_a_rerun_builds_nothing(
    cluster, tmp_path
):
    c, _ = cluster
    store = tmp_path / "store"
    first = sweep(tmp_path / "a", c.address, "sweep.accelerator_type=A100,L4", store=store)
    assert first.returncode == 0, first.stderr[-4000:]
    fingerprints = set()
    for kind in GPUS:
        [job] = (tmp_path / "a").glob(f"*,sweep.accelerator_type={kind}")
        assert json.loads((job / "ray_node.json").read_text())["accelerator_types"] == [kind]
        result = json.loads((job / "result.json").read_text())
        assert result["gpu"] == GPUS[kind][0] and result["store_event"] == "miss, built", result
        fingerprints.add(result["fingerprint"])
    assert len(fingerprints) == 2
    listed = cache("ls", store, "--json")
    assert listed.returncode == 0, listed.stderr
    assert "A100" in listed.stdout and "L4" in listed.stdout

    again = sweep(tmp_path / "b", c.address, "sweep.accelerator_type=A100,L4", store=store)
    assert again.returncode == 0, again.stderr[-4000:]
    summary = (tmp_path / "b" / "sweep_summary.csv").read_text()
    # every job identical to one that ran on a node of its GPU model: restored, none ran
    assert summary.count(",reused") == 2 and "built" not in summary, summary


@pytest.mark.slow
def test_a_job_that_fails_its_gate_is_a_failed_job_with_its_reason_not_a_crashed_worker(
    cluster, tmp_path
):
    c, _ = cluster
    r = sweep(
        tmp_path / "a",
        c.address,
        "sweep.accelerator_type=A100",
        "build.gates.max_engine_mib=0.001",
        store=tmp_path / "store",
    )
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: job")]
    assert r.returncode == 1 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "max_engine_mib" in errors[0] and "WorkerCrashedError" not in errors[0], errors
    rows = (tmp_path / "a" / "sweep_summary.csv").read_text()
    assert "job failed: " in rows and "max_engine_mib" in rows, rows


@pytest.mark.slow
def test_an_accelerator_type_no_node_has_fails_fast_with_one_line(cluster, tmp_path):
    c, _ = cluster
    r = sweep(tmp_path / "a", c.address, "sweep.accelerator_type=H100", store=tmp_path / "store")
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "H100" in r.stderr and "A100" in r.stderr, r.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.slow
@pytest.mark.e2e
def test_a_rerun_on_a_ray_started_for_the_sweep_restores_every_job_without_starting_ray(tmp_path):
    """address=local: the workers run on this machine, so reused jobs are restored before
    Ray starts (hydra_plugins/trt_pipeline/reuse_first.py), and a rerun starts no Ray."""
    store = tmp_path / "store"
    first = sweep(tmp_path / "a", "local", "precision=fp32,fp16", store=store)
    assert first.returncode == 0, first.stderr[-3000:]
    jobs = sorted(p for p in (tmp_path / "a").iterdir() if p.is_dir())
    assert len(jobs) == 2 and all((j / "ray_node.json").is_file() for j in jobs), (
        jobs
    )  # ran as Ray tasks
    again = sweep(tmp_path / "b", "local", "precision=fp32,fp16", store=store)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Ray launcher" not in again.stdout + again.stderr, again.stdout
    rows = list(csv.DictReader((tmp_path / "b" / "sweep_summary.csv").open()))
    assert sorted(r["store"] for r in rows) == ["reused", "reused"], rows
    assert not list((tmp_path / "b").glob("*/ray_node.json"))


def test_jobs_are_restored_first_only_where_the_workers_run_on_this_machine():
    from hydra_plugins.trt_pipeline import reuse_first
    from hydra_plugins.trt_ray_launcher.trt_ray_launcher import TrtRayLauncher

    assert reuse_first.runs_here(TrtRayLauncher(address="local"))
    for address in (
        None,
        "auto",
        "10.0.0.1:6379",
    ):  # Ray's choice may be a cluster: nodes of other fingerprints
        assert not reuse_first.runs_here(TrtRayLauncher(address=address)), address


def test_a_cluster_address_that_does_not_answer_is_one_line(tmp_path):
    r = sweep(
        tmp_path / "a", "127.0.0.1:9", "sweep.accelerator_type=A100", store=tmp_path / "store"
    )
    assert (
        r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "does not answer" in r.stderr
    ), r.stderr


def freeze_under_store_lock(node, run_log: str, locks: Path, deadline: float) -> psutil.Process:
    """The process of `node` writing the job log `run_log` (a glob), stopped while it holds
    an engine key's lock in the store: mid-build, before the entry is published. It runs in
    5 ms slices until then, so the freeze lands there however short the build is (~0.1 s)."""
    raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
    worker = None
    while worker is None:
        assert time.monotonic() < deadline, f"no process of the node has {run_log} open"
        time.sleep(0.05)
        for p in raylet.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if any(fnmatch.fnmatch(f.path, run_log) for f in p.open_files()):
                    worker = p
    while True:
        assert time.monotonic() < deadline, (
            f"the job of {run_log} never took a key's lock in the store"
        )
        worker.suspend()
        if any(locking.holder(p) == str(worker.pid) for p in locks.glob("*.lock")):
            return worker
        worker.resume()
        time.sleep(0.005)


@pytest.mark.slow
def test_a_node_killed_mid_build_fails_its_jobs_only_and_leaves_the_store_valid(cluster, tmp_path):
    """One T4 node runs one T4 job while the other waits for it; the node dies mid-build."""
    c, _ = cluster
    store, t4 = tmp_path / "store", {"TRT_PIPELINE_GPU_PROBE": str(probe(tmp_path, "T4"))}
    node = c.add_node(num_cpus=1, resources={"accelerator_type:T4": 1}, env_vars=t4)
    c.wait_for_nodes()
    out, err = tmp_path / "sweep.out", tmp_path / "sweep.err"
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(
            **sweep_command(
                tmp_path / "a",
                c.address,
                "sweep.accelerator_type=A100,T4",
                "precision=fp32,fp16",
                store=store,
            ),
            stdout=o,
            stderr=e,
        )
    worker = None
    try:
        start = time.monotonic()
        worker = freeze_under_store_lock(
            node,
            f"{tmp_path}/a/*sweep.accelerator_type=T4/run.log",
            store / "locks",
            deadline=start + 120,
        )
        c.remove_node(node, allow_graceful=False)
        node = None
        worker.kill()  # the node's processes die with it; a stopped one cannot notice its raylet is gone
        killed = time.monotonic()
        rc = proc.wait(timeout=90)
        print(
            f"killed {killed - start:.1f} s into the sweep, which ended {time.monotonic() - killed:.1f} s later"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if worker is not None and worker.is_running():
            worker.kill()
        if node is not None:
            c.remove_node(node, allow_graceful=False)
    stderr = err.read_text()
    errors = [line for line in stderr.splitlines() if line.startswith("error: job")]
    assert rc == 1 and len(errors) == 2 and "Traceback" not in stderr, stderr[-4000:]
    for precision, line in zip(
        ("fp32", "fp16"), sorted(errors, key=lambda line: "precision=fp16" in line)
    ):
        assert f"sweep.accelerator_type=T4 precision={precision}" in line and " failed: " in line, (
            errors
        )
    summary = (tmp_path / "a" / "sweep_summary.csv").read_text().splitlines()
    rows = {",".join(r["job"].split(",")[-2:]): r for r in csv.DictReader(summary)}
    for precision in ("fp32", "fp16"):
        assert rows[f"precision={precision},sweep.accelerator_type=T4"]["gates"].startswith(
            "job failed"
        ), rows
        assert rows[f"precision={precision},sweep.accelerator_type=A100"]["store"] == "built", rows

    verify = cache("verify", store)
    assert verify.returncode == 0 and "all intact" in verify.stdout, verify.stdout + verify.stderr
    assert [e["gpu"] for e in json.loads(cache("ls", store, "--json").stdout)] == [
        GPUS["A100"][0]
    ] * 2

    node = c.add_node(num_cpus=1, resources={"accelerator_type:T4": 1}, env_vars=t4)
    c.wait_for_nodes()
    try:
        again = sweep(
            tmp_path / "b",
            c.address,
            "sweep.accelerator_type=T4",
            "precision=fp32,fp16",
            store=store,
        )
    finally:
        c.remove_node(node)
    assert again.returncode == 0, again.stderr[-4000:]
    jobs = sorted((tmp_path / "b").glob("*,sweep.accelerator_type=T4"))
    assert len(jobs) == 2 and all(
        json.loads((j / "result.json").read_text())["gpu"] == T4[0] for j in jobs
    )
    gpus = sorted(e["gpu"] for e in json.loads(cache("ls", store, "--json").stdout))
    assert gpus == [GPUS["A100"][0]] * 2 + [T4[0]] * 2, gpus
    assert cache("verify", store).returncode == 0
