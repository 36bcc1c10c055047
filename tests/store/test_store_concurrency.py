"""Eight builder processes against one store, round after round: one key starts as a
truncated entry, the first process to hold its lock is SIGKILLed. The store code
path is the one the build step uses (get_or_make); the "build" is a sleep that
returns bytes, so ten rounds fit in well under a minute (tests/engine/test_store_pipeline.py
runs the same race with real TensorRT builds)."""

import os
import signal
import subprocess
import sys

import pytest

from pipeline.store import VerifiedStore
from tests.conftest import REPO
from tests.helpers import kill_lock_holder, truncated_entry

BUILDERS = 8
ROUNDS = 10
DAMAGED = "ab" * 32
FRESH = "cd" * 32

BUILDER = """
import os, sys, time
from pipeline.store import VerifiedStore
root, log = sys.argv[1], sys.argv[2]
store = VerifiedStore(root, required=("engine.plan",), what="engine store")
for key in sys.argv[3:]:
    def make():
        time.sleep(0.25)  # the build: a lock holder gets killed in here
        return {"engine.plan": key.encode() * 500}, {"model": "m"}, "miss, built"
    got = store.get_or_make(key, make)
    assert got.read("engine.plan") == key.encode() * 500
    if got.made is not None:
        with open(log, "a") as f:
            f.write(f"{key} {os.getpid()}\\n")
"""


def one_round(root):
    truncated_entry(root, DAMAGED)
    log = root.parent / f"{root.name}.built"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILDER, str(root), str(log), DAMAGED, FRESH],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(BUILDERS)
    ]
    victim = kill_lock_holder(root / "locks" / f"{DAMAGED}.lock", procs, timeout=30)
    outcomes = [(p, *p.communicate(timeout=60)) for p in procs]
    return victim, outcomes, log


@pytest.mark.slow
def test_eight_builders_one_truncated_entry_killed_holder_many_rounds(tmp_path):
    for r in range(ROUNDS):
        root = tmp_path / f"round{r}"
        victim, outcomes, log = one_round(root)
        assert victim is not None, f"round {r}: nobody took the lock of the truncated entry"
        survivors = [(p, out, err) for p, out, err in outcomes if p is not victim]
        assert victim.returncode == -signal.SIGKILL
        crashes = [err for p, _, err in survivors if p.returncode != 0 or "Traceback" in err]
        assert not crashes, f"round {r}: {crashes}"
        built = log.read_text().split() if log.exists() else []
        assert sorted(built[0::2]) == sorted([DAMAGED, FRESH]), (
            f"round {r}: builds {built}"
        )  # one build per key
        store = VerifiedStore(root, required=("engine.plan",))
        assert store.keys() == sorted([DAMAGED, FRESH])
        assert all(store.problems(k) == [] for k in store.keys()), (
            f"round {r}: a damaged entry remains"
        )
        assert [p.name.split(".")[0] for p in (root / "quarantine").iterdir()] == [DAMAGED]
        assert not list((root / "tmp").iterdir()), f"round {r}: temp files left"
        assert not list((root / "locks").iterdir()), f"round {r}: lock files left"
