"""Stages started at once in one checkout (two terminals, a script; no DVC lock around
them) take turns on their output folder: real `python -m stages.build` processes and
real TensorRT-RTX builds."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from pipeline.core import locking
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import output_folder


def _start_builds(repo, env, n):
    return [
        subprocess.Popen(
            [sys.executable, "-m", "stages.build"],
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]


def _read_fp(repo):
    return json.loads((repo / "artifacts" / "fingerprint.json").read_text())["id"]


def _verify(repo, env, folder):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", str(folder)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )


@pytest.mark.e2e
def test_eight_build_stages_at_once_in_one_checkout_build_once_and_all_succeed(
    transformer_repo, tmp_path
):
    repo = transformer_repo
    env = {**os.environ, "TRT_PIPELINE_STORE": str(tmp_path / "store")}
    shutil.rmtree(repo / "artifacts" / "build", ignore_errors=True)
    fp = _read_fp(repo)
    folder = f"artifacts/build/{fp}"
    waiting = re.compile(rf"waiting for another process writing {re.escape(folder)} \(pid \d+\)")
    # Cold: an empty store and no engine folder. Warm: the folder and the entry exist, so
    # all eight copy the entry into one folder at once (where renames collided).
    for round_ in ("cold", "warm"):
        procs = _start_builds(repo, env, 8)
        outs = [p.communicate(timeout=600) for p in procs]
        errs = [err for _, err in outs]
        codes = [p.returncode for p in procs]
        assert codes == [0] * 8, (round_, codes, [e[-2000:] for e in errs if e])
        for err in errs:
            assert "Traceback" not in err and "error:" not in err, (round_, err)
            # one line each: what it waited on, then the stage's own lines
            assert all(waiting.fullmatch(line) for line in err.splitlines() if "waiting" in line)
        built = sum("engine store miss, built" in err for err in errs)
        assert built == (1 if round_ == "cold" else 0), (round_, errs)
        assert sum("engine store hit" in err for err in errs) == (7 if round_ == "cold" else 8)
        if round_ == "cold":  # the builder held the folder for its whole build
            assert any(waiting.search(err) for err in errs), errs
        assert len(list((tmp_path / "store" / "entries").iterdir())) == 1
        verify = _verify(repo, env, repo / folder)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        # nothing half-made beside it (staged or replaced folders) and no lock left behind
        assert sorted(p.name for p in (repo / "artifacts" / "build").iterdir()) == [fp]
        assert list((repo / ".cache" / "locks").iterdir()) == []

    # A stage that cannot get the folder in time: one line naming it and its holder, exit 1,
    # and the holder's folder left as it is.
    held = output_folder.lock_file(Layout(repo), Layout(repo).engine_dir(fp))
    fd = locking.acquire(held)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "stages.build"],
            cwd=repo,
            env={**env, output_folder.TIMEOUT_ENV: "0.5"},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        locking.release(held, fd)
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == [
        f"waiting for another process writing {folder} (pid {os.getpid()})",
        f"error: another process is writing {folder} (pid {os.getpid()}); gave up after 0.5 s "
        f"(${output_folder.TIMEOUT_ENV} sets how long to wait)",
    ], r.stderr
    assert _verify(repo, env, repo / folder).returncode == 0


def test_a_failure_removes_the_output_under_its_lock_and_a_bad_timeout_is_one_line(
    tmp_path, monkeypatch
):
    layout = Layout(tmp_path)
    out = layout.export_dir
    out.mkdir(parents=True)
    (out / "model.onnx").write_bytes(b"old")
    lock = output_folder.lock_file(layout, out)
    with pytest.raises(RuntimeError), output_folder.writing(layout, out):
        assert locking.held(lock)
        raise RuntimeError("the stage failed")
    assert not out.exists() and not lock.exists()
    monkeypatch.setenv(output_folder.TIMEOUT_ENV, "soon")
    with pytest.raises(PipelineError, match="is not a number of seconds"):
        output_folder.timeout_s()
