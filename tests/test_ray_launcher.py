"""The Ray launcher (hydra_plugins/trt_ray_launcher) on a real local multi-node Ray
cluster: nodes advertise accelerator types and each has its own fake GPU probe (fine for
engine keys; never evidence that TensorRT ran: the engines are TensorRT-RTX CPU builds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FAST = ["benchmark.warmup_s=0.02", "benchmark.min_duration_s=0.05", "benchmark.min_iterations=5",
        "inspect.html=false", "benchmark.backends=[onnxruntime,onnxruntime_calibrated]",
        "benchmark.baseline=onnxruntime"]
GPUS = {"A100": ("NVIDIA A100-SXM4-80GB", "8.0", 81920), "L4": ("NVIDIA L4", "8.9", 23034)}


def probe(tmp: Path, kind: str) -> Path:
    name, cc, mib = GPUS[kind]
    p = tmp / f"probe_{kind}.json"
    p.write_text(json.dumps({"name": name, "compute_capability": cc, "memory_mib": mib, "_driver": "580.65.06",
                             "_cuda_driver": 13000}))
    return p


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = {kind: c.add_node(num_cpus=1, resources={f"accelerator_type:{kind}": 1},
                              env_vars={"TRT_PIPELINE_GPU_PROBE": str(probe(tmp, kind))}) for kind in GPUS}
    c.wait_for_nodes()
    yield c, nodes
    c.shutdown()


def sweep(tmp: Path, address: str, *overrides: str, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRT_PIPELINE_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "pipeline.run", "--multirun", "hydra/launcher=trt_ray",
                           f"hydra.launcher.address={address}", f"hydra.sweep.dir={tmp}", "model=cnn",
                           "build.backend=tensorrt_rtx", *overrides, *FAST], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.e2e
def test_each_gpu_model_builds_its_own_engine_on_its_own_node_and_a_rerun_builds_nothing(cluster, tmp_path):
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
    listed = subprocess.run([sys.executable, "-m", "pipeline", "cache", "ls", "--json", "--store", str(store)],
                            cwd=REPO, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    assert "A100" in listed.stdout and "L4" in listed.stdout

    again = sweep(tmp_path / "b", c.address, "sweep.accelerator_type=A100,L4", store=store)
    assert again.returncode == 0, again.stderr[-4000:]
    summary = (tmp_path / "b" / "sweep_summary.csv").read_text()
    assert summary.count(",hit") == 2 and "built" not in summary, summary


@pytest.mark.slow
def test_an_accelerator_type_no_node_has_fails_fast_with_one_line(cluster, tmp_path):
    c, _ = cluster
    r = sweep(tmp_path / "a", c.address, "sweep.accelerator_type=H100", store=tmp_path / "store")
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "H100" in r.stderr and "A100" in r.stderr, r.stderr
    assert not (tmp_path / "store").exists()


def test_a_cluster_address_that_does_not_answer_is_one_line(tmp_path):
    r = sweep(tmp_path / "a", "127.0.0.1:9", "sweep.accelerator_type=A100", store=tmp_path / "store")
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "does not answer" in r.stderr, r.stderr
