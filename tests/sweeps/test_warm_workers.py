"""Joblib sweep workers forked from a forkserver that has imported the heavy libraries
(pipeline/sweeps/warm_workers.py), and the sweeper that skips composing each job twice
(hydra_plugins/trt_pipeline/checked_sweeper.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeline.cli import overrides
from pipeline.core.errors import PipelineError
from pipeline.sweeps import warm_workers

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_wanted_only_for_the_joblib_launcher_on_the_command_line():
    assert warm_workers.wanted(["precision=fp32,fp16", "hydra/launcher=joblib"])
    assert warm_workers.wanted(["+hydra/launcher=joblib"])
    assert not warm_workers.wanted(["precision=fp32,fp16"])
    assert not warm_workers.wanted(["hydra/launcher=trt_ray"])


def test_n_jobs_is_read_from_the_command_line_as_hydra_would():
    assert warm_workers.n_jobs(["precision=fp32,fp16"]) == -1  # the joblib launcher's default
    assert (
        warm_workers.n_jobs(["hydra.launcher.n_jobs=3", "++hydra.launcher.n_jobs=2"]) == 2
    )  # the last one wins
    assert warm_workers.n_jobs(["hydra.launcher.n_jobs=${oc.env:N}"]) is None  # left to Hydra


# The server preloads torch, whose OpenMP pool reads OMP_NUM_THREADS when it loads: the
# worker must see loky's limit both in its environment and in torch itself.
_WORKER_THREADS = """
import json, os
from joblib import Parallel, delayed
from pipeline.sweeps import warm_workers

def threads(_):
    import torch
    return os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()

if __name__ == "__main__":
    assert warm_workers.start(("torch",), jobs=2)
    print(json.dumps({"want": warm_workers.thread_limits(2)["OMP_NUM_THREADS"],
                      "main": os.environ.get("OMP_NUM_THREADS"),
                      "seen": Parallel(n_jobs=2)(delayed(threads)(i) for i in range(2))}))
"""


def test_workers_of_the_preloading_server_keep_lokys_thread_limits(tmp_path):
    """loky gives its own workers OMP_NUM_THREADS = cores // n_jobs; a forkserver's
    workers would get the server's environment instead, and two jobs on two cores would
    each run a full-size spinning pool (a benchmark 500x slower than alone)."""
    script = tmp_path / "threads.py"
    script.write_text(_WORKER_THREADS)
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_NUM_THREADS"}
    r = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["main"] is None  # the sweep's own process is left as it was
    assert out["seen"] == [[out["want"], int(out["want"])]] * 2, out


# In a fresh interpreter: the start method and the forkserver are process-wide.
_WORKER_SEES = """
import json, os, sys
from joblib import Parallel, delayed
from pipeline.sweeps import warm_workers

def where(_):
    return os.getpid(), os.getppid(), "onnx" in sys.modules

if __name__ == "__main__":
    started = warm_workers.start(("onnx",))
    again = warm_workers.start(("onnx",))
    seen = Parallel(n_jobs=2)(delayed(where)(i) for i in range(4))
    print(json.dumps({"started": started, "again": again, "main": os.getpid(), "seen": seen,
                      "main_has_onnx": "onnx" in sys.modules}))
"""


def test_workers_fork_from_a_server_that_preloaded_the_libraries(tmp_path):
    script = tmp_path / "warm.py"
    script.write_text(_WORKER_SEES)
    r = subprocess.run(
        [sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["started"] and not out["again"]  # a start method already chosen is left alone
    assert not out["main_has_onnx"]  # imported in the server, not in the sweep's own process
    for _pid, parent, has_onnx in out["seen"]:
        assert has_onnx, "a worker started without the preloaded module"
        assert parent != out["main"], "a worker was not forked from the forkserver"


def test_the_preload_touches_no_cuda_library():
    """A forked child cannot use a CUDA context its parent made: what the forkserver
    imports must not import TensorRT (or another library that calls CUDA as it loads),
    load the CUDA driver or NVML library, or initialise CUDA in torch. torch itself imports
    cuda-python's and NVML's Python bindings: they load no library until called, and
    PyTorch supports fork after import while CUDA is uninitialised (DataLoader workers).
    Without a GPU only the module check can fail here."""
    probe = (
        "import json, sys\n"
        f"for m in {list(warm_workers.PRELOAD)!r}: __import__(m)\n"
        "import torch\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorrt', 'tensorrt_rtx', 'pycuda', 'cupy'))\n"
        "maps = open('/proc/self/maps').read()\n"
        "libs = sorted({n for n in ('libcuda.so', 'libnvidia-ml.so') if n in maps})\n"
        "print(json.dumps({'bad': bad, 'libs': libs, 'cuda_initialized': torch.cuda.is_initialized()}))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out == {"bad": [], "libs": [], "cuda_initialized": False}


def test_the_sweeper_skips_its_composition_only_for_the_overrides_that_were_checked(monkeypatch):
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    from hydra_plugins.trt_pipeline.checked_sweeper import CheckedSweeper

    composed = []
    monkeypatch.setattr(
        BasicSweeper, "validate_batch_is_legal", lambda self, batch: composed.extend(batch)
    )
    sweeper = CheckedSweeper(max_batch_size=None, params=None)
    sweeper._arguments = ("precision=fp32,fp16",)
    batch = [["precision=fp32"], ["precision=fp16"]]
    monkeypatch.setattr(overrides, "checked_sweep", ("precision=fp32,fp16",))
    sweeper.validate_batch_is_legal(batch)
    assert composed == []
    for checked, params in (
        (("precision=fp32,int8",), None),
        (None, None),
        (("precision=fp32,fp16",), {"a": "1,2"}),
    ):
        monkeypatch.setattr(overrides, "checked_sweep", checked)
        sweeper.params = params or {}
        sweeper.validate_batch_is_legal(batch)
        assert composed == batch, (checked, params)
        composed.clear()


def test_check_records_the_job_overrides_of_a_multirun(monkeypatch):
    monkeypatch.setattr(overrides, "checked_sweep", None)
    overrides.check(
        ["precision=fp32,fp16", "hydra.launcher.n_jobs=2", "hydra/launcher=joblib"],
        REPO / "conf",
        multirun=True,
    )
    assert overrides.checked_sweep == ("precision=fp32,fp16",)
    with pytest.raises(PipelineError):  # a check that fails leaves nothing to stand in for Hydra's
        overrides.check(["precision=fp32,fp17"], REPO / "conf", multirun=True)
    assert overrides.checked_sweep is None


# The server's preload (pipeline/sweeps/warm_server.py) freezes what it imported for the garbage
# collector, and its last exit hook ends it at once: no teardown of its modules, whose
# __del__ would otherwise write the witness file as they are cleared.
_SERVER_EXIT = """
import json, os, sys
from joblib import Parallel, delayed
from pipeline.sweeps import warm_workers

def env(_):
    import gc
    return os.environ.get("TRT_PIPELINE_WARM_SERVER"), "witness" in sys.modules, gc.get_freeze_count() > 1000

if __name__ == "__main__":
    assert warm_workers.start(("witness",), jobs=2)
    seen = Parallel(n_jobs=2)(delayed(env)(i) for i in range(2))
    print(json.dumps({"workers": seen,
                      "main": os.environ.get("TRT_PIPELINE_WARM_SERVER")}))
"""
_WITNESS = """
import os

class _Witness:
    def __del__(self, open=open, path=os.environ["WITNESS_FILE"], pid=os.getpid):  # builtins go first
        with open(path, "a") as f:
            f.write(f"{pid()} tore down\\n")

witness = _Witness()
"""


def test_the_server_freezes_its_imports_leaves_without_tearing_down_and_its_mark_reaches_no_worker(
    tmp_path,
):
    """Python's teardown of a server holding torch takes ~0.7 s after the sweep has ended,
    holding open any pipe that reads the sweep's output."""
    (tmp_path / "server_exit.py").write_text(_SERVER_EXIT)
    (tmp_path / "witness.py").write_text(_WITNESS)
    env = {
        **__import__("os").environ,
        "PYTHONPATH": f"{tmp_path}:{REPO}",
        "WITNESS_FILE": str(tmp_path / "torn"),
    }
    r = subprocess.run(
        [sys.executable, str(tmp_path / "server_exit.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )  # returns once every process holding its pipes is gone
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    # Each worker has the server's imports, frozen for its garbage collector, and not its mark.
    assert out["workers"] == [[None, True, True]] * 2 and out["main"] is None, out
    assert not (tmp_path / "torn").exists(), (tmp_path / "torn").read_text()
