"""Ctrl-C and SIGTERM always stop a real TensorRT-RTX build: exit 130/143, nothing
stored, no engine folder left looking current."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.e2e


def _stage(repo, name, env, check=True):
    r = subprocess.run(
        [sys.executable, "-m", f"stages.{name}"], cwd=repo, env=env, capture_output=True, text=True
    )
    if check:
        assert r.returncode == 0, r.stderr
    return r


def _reset(repo, store, env):
    """An empty store and no engine folder: the next build is a cold one."""
    for key in _entries(store):
        subprocess.run(
            [sys.executable, "-m", "pipeline", "cache", "rm", key],
            cwd=repo,
            env=env,
            check=True,
            capture_output=True,
        )
    shutil.rmtree(repo / "artifacts" / "build", ignore_errors=True)


def _entries(store):
    return (
        sorted(p.name for p in (store / "entries").iterdir())
        if (store / "entries").is_dir()
        else []
    )


def _sigint_default() -> None:
    """A child's SIGINT as a terminal gives it: a suite started in the background by a
    shell without job control (`.ci/run &`) passes SIGINT ignored, and a child keeps that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_signals_at_several_points_of_a_build_stop_it_and_store_nothing(in_tmp_repo_copy, tmp_path):
    repo = in_tmp_repo_copy
    store = tmp_path / "store"
    env = {**os.environ, "TRT_PIPELINE_STORE": str(store)}
    subprocess.run(
        [sys.executable, "-m", "pipeline", "params", "model=transformer"],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    for name in ("fingerprint", "export", "calibrate"):
        _stage(repo, name, env)
    _stage(repo, "build", env)  # a cold build once, so every module is compiled and cached
    _reset(repo, store, env)
    interrupted = 0
    # The key's lock file exists exactly while the engine is being made: each round
    # waits for it, then signals at a different point of the build.
    # The transformer builds in ~0.4 s here: the delays stay inside it, so at least two
    # rounds land during the build whether the machine is idle or loaded.
    for delay, sig in (
        (0.0, signal.SIGINT),
        (0.05, signal.SIGTERM),
        (0.15, signal.SIGINT),
        (0.3, signal.SIGTERM),
    ):
        p = subprocess.Popen(
            [sys.executable, "-m", "stages.build"],
            cwd=repo,
            env=env,
            preexec_fn=_sigint_default,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while (
            not list((store / "locks").glob("*.lock"))
            and p.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        time.sleep(delay)
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
        assert p.returncode in (0, 130 if sig == signal.SIGINT else 143), (p.returncode, err)
        if (
            p.returncode == 0 or "miss, built" in err
        ):  # the build had finished before the signal landed
            _reset(repo, store, env)
            continue
        if (
            "stored whole" in err
        ):  # the signal came after the store's commit: the entry must be whole
            verify = subprocess.run(
                [sys.executable, "-m", "pipeline", "cache", "verify"],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
            )
            assert verify.returncode == 0 and len(_entries(store)) == 1, (
                verify.stdout + verify.stderr
            )
            _reset(repo, store, env)
            continue
        interrupted += 1
        assert "Exception caught" not in err and "Traceback" not in err
        assert _entries(store) == [], "an interrupted build stored an entry"
        assert not list((store / "tmp").glob("*")) if (store / "tmp").exists() else True
        assert not list((store / "locks").glob("*.lock")) if (store / "locks").exists() else True
        assert not list((repo / "artifacts" / "build").glob("*/engine.plan"))
    assert interrupted >= 2, "the signals all came too late to test anything"

    # A signal right after the store's commit, made certain: the stage stops (130), says the
    # entry is whole, the entry verifies, and no engine folder is left looking current.
    _reset(repo, store, env)
    after_commit = (
        "import os, runpy, signal\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"  # see _sigint_default
        "from pipeline.store import VerifiedStore\n"
        "put = VerifiedStore.put\n"
        "def put_then_signal(self, *a, **k):\n"
        "    entry = put(self, *a, **k)\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return entry\n"
        "VerifiedStore.put = put_then_signal\n"
        "runpy.run_module('stages.build', run_name='__main__')\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", after_commit], cwd=repo, env=env, capture_output=True, text=True
    )
    assert r.returncode == 130 and "stored whole" in r.stderr and "Traceback" not in r.stderr, (
        r.stderr
    )
    assert len(_entries(store)) == 1
    assert (
        subprocess.run(
            [sys.executable, "-m", "pipeline", "cache", "verify"], cwd=repo, env=env
        ).returncode
        == 0
    )
    assert not list((repo / "artifacts" / "build").glob("*/engine.plan"))


# The stage CLI with the real logger (or progress monitor), which sends a signal to its own
# process from inside TensorRT's log() (step_complete()) callback, once: at the first
# record of one phase (the parse, the build), or at the build's first step.
SIGNAL_IN_CALLBACK = """
import os, runpy, signal, sys
from pipeline.engine import build
phase, sig = sys.argv[1], getattr(signal, sys.argv[2])
sys.argv = sys.argv[:1]
sent = []
def signal_once(where):
    if not sent:
        sent.append(where)
        print(f"signalled inside {where}() while TensorRT ran the {phase}", flush=True)
        os.kill(os.getpid(), sig)
make_logger, make_progress_monitor = build.make_logger, build.make_progress_monitor
def signalling_logger(trt):
    logger = make_logger(trt)
    log = type(logger).log
    def log_then_signal(self, severity, msg):
        log(self, severity, msg)
        if self.phase == phase:
            signal_once("log")
    type(logger).log = log_then_signal
    return logger
def signalling_monitor(*args, **kwargs):
    monitor = make_progress_monitor(*args, **kwargs)
    step_complete = type(monitor).step_complete
    def signal_then_step(self, phase_name, step):
        signal_once("step_complete")
        return step_complete(self, phase_name, step)
    type(monitor).step_complete = signal_then_step
    return monitor
if phase == "progress":
    build.make_progress_monitor = signalling_monitor
else:
    build.make_logger = signalling_logger
runpy.run_module("stages.build", run_name="__main__")
"""


@pytest.mark.parametrize("phase", ["parse", "build", "progress"])
def test_a_signal_inside_a_tensorrt_callback_stops_the_stage_and_stores_nothing(
    transformer_repo, tmp_path, phase
):
    repo = transformer_repo
    store = tmp_path / "store"
    env = {**os.environ, "TRT_PIPELINE_STORE": str(store)}
    for sig, code, line in (
        (signal.SIGINT, 130, "error: interrupted"),
        (signal.SIGTERM, 143, "error: stopped by signal 15"),
    ):
        shutil.rmtree(repo / "artifacts" / "build", ignore_errors=True)
        r = subprocess.run(
            [sys.executable, "-c", SIGNAL_IN_CALLBACK, phase, sig.name],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert f"() while TensorRT ran the {phase}" in r.stdout, r.stderr
        # TensorRT printed nothing ("Exception caught in log()"), the stage printed one line
        assert (r.returncode, r.stderr.splitlines()) == (code, [line]), r.stderr
        assert _entries(store) == [], "an interrupted build stored an entry"
        assert not (repo / "artifacts" / "build").exists() or not any(
            (repo / "artifacts" / "build").iterdir()
        )
        assert not list((store / "locks").glob("*.lock")) if (store / "locks").exists() else True


def test_no_cyclic_collection_inside_tensorrt_scope():
    """A collection inside a TensorRT callback that frees a TensorRT object of an earlier
    build waits on TensorRT's own lock for ever (a second trt.Builder() hung so): cycles go
    on entry, and none is collected until TensorRT has returned."""
    import gc
    import weakref

    from pipeline.engine import interrupt

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    before = Cycle()
    gone_before = weakref.ref(before)
    del before
    with interrupt.tensorrt_scope():
        assert gone_before() is None and not gc.isenabled()
        inside = Cycle()
        gone_inside = weakref.ref(inside)
        del inside
        for _ in range(100_000):  # far past the collector's thresholds
            Cycle()
        assert gone_inside() is not None
    assert gc.isenabled()
    gc.collect()
    assert gone_inside() is None
