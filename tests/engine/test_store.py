import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline.core.errors import PipelineError
from pipeline.engine.store import EngineStore, parse_size, prune
from tests.conftest import REPO
from tests.helpers import KEY, OTHER, damage_entry, put


def test_put_then_get_verifies(tmp_path):
    store = EngineStore(tmp_path)
    put(store)
    entry = store.get(KEY)
    assert entry.file("engine.plan").read_bytes() == b"engine-bytes" * 100
    assert store.keys() == [KEY]
    assert not list((tmp_path / "tmp").iterdir())


DAMAGES = [
    "truncate",
    "flip",
    "delete",
    "entry_json",
    "[]",
    "{}",
    "null",
    "files_list",
    "escape",
    "symlink",
    "manifest{}",
    "manifest_escape",
]


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_entry_is_refused_and_moved_aside_only_under_its_lock(tmp_path, capsys, damage):
    store = EngineStore(tmp_path / "store")
    damage_entry(put(store), damage)
    assert store.get(KEY) is None  # refused without the lock: reported by the caller, not moved
    assert store.keys() == [KEY] and capsys.readouterr().err == ""
    with store.lock(KEY):
        assert store.get(KEY) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "damaged" in err, err
    assert store.keys() == []
    assert len(list((store.root / "quarantine").iterdir())) == 1
    put(store)  # and it can be rebuilt in place
    assert store.get(KEY) is not None
    assert not list(store.locks.iterdir()), "no lock files left"


def test_unfinished_write_of_a_dead_process_is_cleaned(tmp_path):
    store = EngineStore(tmp_path)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    debris = tmp_path / "tmp" / f"{KEY}.{dead}.1"
    debris.mkdir(parents=True)
    (debris / "engine.plan").write_bytes(b"half")
    mine = tmp_path / "tmp" / f"{OTHER}.{os.getpid()}.1"
    mine.mkdir()
    # A store shared by several hosts: another host's pid means nothing here.
    elsewhere = tmp_path / "tmp" / f"{KEY}.{dead}.2.otherhost"
    elsewhere.mkdir()
    abandoned = tmp_path / "tmp" / f"{OTHER}.{dead}.3.otherhost"
    abandoned.mkdir()
    two_days_ago = time.time() - 2 * 86400
    os.utime(abandoned, (two_days_ago, two_days_ago))
    assert sorted(store.clean_tmp()) == sorted([debris, abandoned])
    assert mine.exists() and elsewhere.exists() and store.keys() == []


def test_prune_drops_least_recently_used(tmp_path):
    store = EngineStore(tmp_path)
    put(store, KEY, b"x" * 1000)
    put(store, OTHER, b"y" * 1000)
    old = time.time() - 3600
    os.utime(store.entries / KEY / "entry.json", (old, old))
    store.get(OTHER)  # marks OTHER as used now
    fits_one = store.get(OTHER).size + 100
    assert prune(store, fits_one, dry_run=True) == [KEY] and len(store.keys()) == 2
    assert prune(store, fits_one) == [KEY]
    assert store.keys() == [OTHER]


def test_parse_size_needs_a_unit():
    assert parse_size("2G") == 2 << 30
    assert parse_size("500MiB") == 500 << 20
    assert parse_size("500m") == 500 << 20
    assert parse_size("1.5G") == 3 << 29
    assert parse_size("1024B") == 1024
    for bad in ("5", "1024", "lots", "1.2.3G", "G", "-1G", ""):
        with pytest.raises(PipelineError):
            parse_size(bad)


def test_lock_of_a_killed_process_is_recovered(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pipeline.engine.store import EngineStore\n"
            f"with EngineStore(sys.argv[1]).lock('{KEY}'):\n    print('held', flush=True)\n    time.sleep(60)\n",
            str(tmp_path),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    store = EngineStore(tmp_path)
    with pytest.raises(PipelineError, match="locked by another builder"):
        with store.lock(KEY, timeout=0.2):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (store.locks / f"{KEY}.lock").exists()  # the killed holder's file, reused and removed
    with store.lock(KEY, timeout=5):
        pass
    assert not list(store.locks.iterdir())


def test_cache_cli_ls_verify_rm(tmp_path):
    store = EngineStore(tmp_path)
    put(
        store,
        labels={
            "model": "cnn",
            "precision": "fp16",
            "gpu": "no GPU",
            "trt": "tensorrt_rtx 1.7",
            "profile": "dynamic",
            "calibration": "-",
            "fallback": "Softmax",
        },
    )

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "pipeline", "cache", *args, "--store", str(tmp_path)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )

    ls = cli("ls")
    assert (
        ls.returncode == 0
        and KEY[:16] in ls.stdout
        and "fp16" in ls.stdout
        and "last used" in ls.stdout
    )
    assert "dynamic" in ls.stdout and "Softmax" in ls.stdout
    assert cli("verify").returncode == 0
    (store.entries / KEY / "engine.plan").write_bytes(b"short")
    bad = cli("verify")
    assert bad.returncode == 1 and "DAMAGED" in bad.stdout and bad.stderr.startswith("error:")
    assert store.keys() == [KEY], "plain verify only reports"
    fixed = cli("verify", "--repair")
    assert fixed.returncode == 0 and "moved to" in fixed.stdout and store.keys() == []
    assert cli("verify").returncode == 0
    put(store)
    dry = cli("rm", KEY[:8], "--dry-run")
    assert dry.returncode == 0 and "would remove" in dry.stdout and store.keys() == [KEY]
    assert cli("rm", KEY[:8]).returncode == 0 and store.keys() == []
    assert not list(store.locks.iterdir())


def test_labels_tell_entries_of_one_model_and_precision_apart():
    """What `cache ls` shows beside model and precision: profile, calibration, fallback."""
    from pipeline.flow import engine_folder
    from tests.conftest import compose

    fp = {"gpu": None, "trt_flavour": "tensorrt_rtx", "trt_version": "1.7.1.116", "id": "nogpu"}
    int8 = ("model=transformer", "precision=int8")
    plain = engine_folder.store_labels(compose(*int8), fp)
    samples = engine_folder.store_labels(compose(*int8, "calibration=transformer_samples"), fp)
    kept = engine_folder.store_labels(
        compose(*int8, "calibration=transformer_samples", "calibration.exclude_op_types=[Softmax]"),
        fp,
    )
    assert (plain["calibration"], samples["calibration"]) == (
        "none (entropy)",
        "transformer_samples (entropy)",
    )
    assert (samples["fallback"], kept["fallback"]) == ("-", "Softmax")
    fp16 = engine_folder.store_labels(
        compose("precision=fp16", "precision.keep_fp32_op_types=[Softmax]"), fp
    )
    assert fp16["fallback"] == "Softmax" and fp16["calibration"] == "-"
    assert (
        engine_folder.store_labels(compose("profile=two_profiles"), fp)["profile"] == "two_profiles"
    )


@pytest.mark.parametrize(
    "edit",
    [
        {"inputs_file": "../../../etc/passwd"},
        {"cache_key": "../../elsewhere"},
        {"calibrator": "../x"},
        {"flags": "INT8"},
    ],
)
def test_weak_typing_paths_from_calibration_json_are_confined(edit):
    """calibration.json is a DVC output: names in it become paths only if they are
    exactly what the calibrate stage writes."""
    from pipeline.core.layout import WEAK_CALIBRATION_INPUTS
    from pipeline.engine.weak_typing import checked_info

    good = {
        "flags": ["INT8"],
        "calibrator": "IInt8EntropyCalibrator2",
        "inputs_file": WEAK_CALIBRATION_INPUTS,
        "cache_key": "ab" * 32,
    }
    assert checked_info(good) == good
    with pytest.raises(PipelineError, match="rerun calibrate"):
        checked_info({**good, **edit})


def test_a_loader_does_not_re_read_an_engine_linked_from_a_verified_entry(tmp_path, monkeypatch):
    """inspect and benchmark load artifacts/build/<fp>/engine.plan: a hard link to a store
    entry the store recorded as verified is intact without a read; a copy is hashed."""
    import json

    from pipeline.core import hashing
    from pipeline.engine import verify

    store = EngineStore(tmp_path / "store")
    entry = put(store, engine=os.urandom(2 << 20))
    manifest = json.loads(entry.file("manifest.json").read_text())
    folder = tmp_path / "build"
    folder.mkdir()
    entry.link_to("engine.plan", folder / "engine.plan")
    (folder / "manifest.json").write_bytes(entry.file("manifest.json").read_bytes())
    read = []
    real = hashing.sha256_file
    monkeypatch.setattr(hashing, "sha256_file", lambda p, *a: read.append(p) or real(p, *a))
    assert verify.assert_loadable(folder, manifest["fingerprint"], store) == manifest
    assert read == []
    (folder / "engine.plan").unlink()
    (folder / "engine.plan").write_bytes(entry.file("engine.plan").read_bytes())  # a copy
    assert verify.assert_loadable(folder, manifest["fingerprint"], store) == manifest
    assert read == [folder / "engine.plan"]
