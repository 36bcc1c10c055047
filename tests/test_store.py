import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline.engine import store as store_lib
from pipeline.core.errors import PipelineError
from tests.conftest import REPO

KEY = "ab" * 32
OTHER = "cd" * 32


def put(store, key=KEY, engine=b"engine-bytes" * 100, labels=None):
    with store.lock(key):
        return store.put(key, {"engine.plan": engine, "manifest.json": b"{}"}, labels or {"model": "m"})


def test_put_then_get_verifies(tmp_path):
    store = store_lib.EngineStore(tmp_path)
    put(store)
    entry = store.get(KEY)
    assert entry.file("engine.plan").read_bytes() == b"engine-bytes" * 100
    assert store.keys() == [KEY]
    assert not list((tmp_path / "tmp").iterdir())


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "entry_json"])
def test_corrupt_entry_is_reported_moved_aside_never_loaded(tmp_path, capsys, damage):
    store = store_lib.EngineStore(tmp_path)
    entry = put(store)
    engine = entry.file("engine.plan")
    if damage == "truncate":
        engine.write_bytes(engine.read_bytes()[:100])
    elif damage == "flip":
        data = bytearray(engine.read_bytes())
        data[5] ^= 1
        engine.write_bytes(bytes(data))
    elif damage == "delete":
        engine.unlink()
    else:
        (entry.path / "entry.json").write_text("{not json")
    assert store.get(KEY) is None
    assert "corrupt" in capsys.readouterr().err
    assert store.keys() == []
    assert len(list((tmp_path / "quarantine").iterdir())) == 1
    put(store)  # and it can be rebuilt in place
    assert store.get(KEY) is not None


def test_unfinished_write_of_a_dead_process_is_cleaned(tmp_path):
    store = store_lib.EngineStore(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    debris = tmp_path / "tmp" / f"{KEY}.{dead}.1"
    debris.mkdir(parents=True)
    (debris / "engine.plan").write_bytes(b"half")
    mine = tmp_path / "tmp" / f"{OTHER}.{os.getpid()}.1"
    mine.mkdir()
    assert store.clean_tmp() == [debris]
    assert mine.exists() and store.keys() == []


def test_prune_drops_least_recently_used(tmp_path):
    store = store_lib.EngineStore(tmp_path)
    put(store, KEY, b"x" * 1000)
    put(store, OTHER, b"y" * 1000)
    old = time.time() - 3600
    os.utime(store.entries / KEY / "entry.json", (old, old))
    store.get(OTHER)  # marks OTHER as used now
    assert store_lib.prune(store, 1500) == [KEY]
    assert store.keys() == [OTHER]


def test_parse_size():
    assert store_lib.parse_size("2G") == 2 << 30
    assert store_lib.parse_size("500MiB") == 500 << 20
    assert store_lib.parse_size("1024") == 1024
    with pytest.raises(PipelineError):
        store_lib.parse_size("lots")


def test_lock_of_a_killed_process_is_recovered(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom pipeline.engine.store import EngineStore\n"
         f"with EngineStore(sys.argv[1]).lock('{KEY}'):\n    print('held', flush=True)\n    time.sleep(60)\n",
         str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    store = store_lib.EngineStore(tmp_path)
    with pytest.raises(PipelineError, match="locked by another builder"):
        with store.lock(KEY, timeout=0.2):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with store.lock(KEY, timeout=5):
        pass


def test_cache_cli_ls_verify_rm(tmp_path):
    store = store_lib.EngineStore(tmp_path)
    put(store, labels={"model": "cnn", "precision": "fp16", "gpu": "no GPU", "trt": "tensorrt_rtx 1.7"})

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "pipeline", "cache", *args, "--store", str(tmp_path)],
                              cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})

    ls = cli("ls")
    assert ls.returncode == 0 and KEY[:16] in ls.stdout and "fp16" in ls.stdout and "last used" in ls.stdout
    assert cli("verify").returncode == 0
    (store.entries / KEY / "engine.plan").write_bytes(b"short")
    bad = cli("verify")
    assert bad.returncode == 1 and "CORRUPT" in bad.stdout and bad.stderr.startswith("error:")
    assert cli("verify").returncode == 0  # moved aside: the store is valid again
    put(store)
    assert cli("rm", KEY[:8]).returncode == 0 and store.keys() == []
