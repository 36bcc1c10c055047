"""The engine store inside the real build step: hits import no TensorRT, concurrent
builders build once, a builder killed mid-build leaves the store valid."""

import os
import shutil
import signal
import subprocess
import sys

from pipeline.core import fileio, hashing
from pipeline.core.layout import Layout
from pipeline.engine.store import EngineStore
from pipeline.flow import stages
from tests.conftest import REPO
from tests.helpers import prepared_copy

BUILD_IN = """
import sys
from pipeline.flow import stages
from tests.conftest import compose
from pipeline.core.layout import Layout
stages.build(compose(*sys.argv[2:]), Layout(__import__('pathlib').Path(sys.argv[1])), progress=False)
print('tensorrt imported:', any(m.split('.')[0] in ('tensorrt', 'tensorrt_rtx') for m in sys.modules))
"""


def start_build(root, store_dir, *overrides, stderr=None):
    env = {**os.environ, "TRT_PIPELINE_STORE": str(store_dir), "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", BUILD_IN, str(root), *overrides],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr or subprocess.PIPE,
        text=True,
    )


def test_hit_imports_no_tensorrt_and_gives_the_same_outputs(tmp_path, built_transformer):
    _, layout = built_transformer
    store_dir = tmp_path / "store"
    a, b = prepared_copy(layout, tmp_path / "a"), prepared_copy(layout, tmp_path / "b")
    first = start_build(a, store_dir, "model=transformer")
    out, err = first.communicate()
    assert first.returncode == 0, err
    assert "engine store miss, built" in err and "tensorrt imported: True" in out
    second = start_build(b, store_dir, "model=transformer")
    out, err = second.communicate()
    assert second.returncode == 0, err
    assert "engine store hit" in err and "tensorrt imported: False" in out
    fp = stages.read_fingerprint(layout)["id"]
    for name in ("engine.plan", "manifest.json", "build.log", "network.json"):
        assert (a / "artifacts/build" / fp / name).read_bytes() == (
            b / "artifacts/build" / fp / name
        ).read_bytes()


def test_eight_builders_one_truncated_entry_one_killed_build_once(tmp_path, built_transformer):
    """Real TensorRT builds: eight builders meet one truncated entry of their key, the
    first to hold the lock is SIGKILLed; one survivor builds, the rest hit."""
    from pipeline.engine import cache_key
    from tests.conftest import compose
    from tests.helpers import kill_lock_holder, truncated_entry

    _, layout = built_transformer
    store_dir = tmp_path / "store"
    roots = [prepared_copy(layout, tmp_path / f"w{i}") for i in range(8)]
    key = cache_key.cache_key(
        cache_key.engine_key_inputs(
            compose("model=transformer"), Layout(roots[0]), stages.read_fingerprint(layout)
        )
    )
    truncated_entry(store_dir, key)
    logs = [open(tmp_path / f"w{i}.err", "w+") for i in range(8)]
    procs = [
        start_build(r, store_dir, "model=transformer", stderr=log) for r, log in zip(roots, logs)
    ]
    killed = kill_lock_holder(store_dir / "locks" / f"{key}.lock", procs, timeout=120)
    assert killed is not None, "no builder started building"
    victim = procs.index(killed)
    for p in procs:
        p.wait(timeout=240)
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read())
    assert procs[victim].returncode == -signal.SIGKILL
    survivors = [t for i, t in enumerate(texts) if i != victim]
    assert all(procs[i].returncode == 0 for i in range(8) if i != victim), texts
    assert not any("Traceback" in t for t in survivors), texts
    # The victim never finished; exactly one survivor built, the others found its entry.
    assert sum("engine store miss, built" in t for t in texts) == 1, texts
    assert sum("engine store hit" in t for t in survivors) == 6, texts
    store = EngineStore(store_dir)
    assert store.keys() == [key] and store.problems(key) == []
    assert len(list((store_dir / "quarantine").iterdir())) == 1  # the truncated entry, once
    assert not list((store_dir / "tmp").iterdir()) and not list((store_dir / "locks").iterdir())


def test_corrupt_store_entry_is_rebuilt_by_the_build_step(tmp_path, built_cnn):
    _cfg, layout = built_cnn
    store_dir = tmp_path / "store"
    root = prepared_copy(layout, tmp_path / "a")
    p = start_build(root, store_dir)
    assert p.wait() == 0
    store = EngineStore(store_dir)
    [key] = store.keys()
    engine = store.entries / key / "engine.plan"
    engine.write_bytes(engine.read_bytes()[: engine.stat().st_size // 2])
    shutil.rmtree(root / "artifacts/build")  # nothing intact to adopt: it must rebuild
    p = start_build(root, store_dir)
    _out, err = p.communicate()
    assert p.returncode == 0 and "is damaged" in err and "engine store miss, built" in err
    fp = stages.read_fingerprint(layout)["id"]
    manifest = fileio.read_json(root / "artifacts/build" / fp / "manifest.json")
    assert (
        hashing.sha256_file(root / "artifacts/build" / fp / "engine.plan")
        == manifest["engine"]["sha256"]
    )


def test_verify_cli_says_why_an_engine_is_not_current(tmp_path, built_cnn):
    _, layout = built_cnn
    repo = prepared_copy(layout, tmp_path / "r")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRT_PIPELINE_STORE": str(tmp_path / "store")}
    subprocess.run(
        [sys.executable, "-m", "pipeline", "params", "--conf", str(REPO / "conf")],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    assert subprocess.run([sys.executable, "-m", "stages.build"], cwd=repo, env=env).returncode == 0
    fp = stages.read_fingerprint(layout)["id"]
    engine = f"artifacts/build/{fp}/engine.plan"

    def verify(*extra):
        return subprocess.run(
            [sys.executable, "-m", "pipeline", "verify", engine, *extra],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
        )

    ok = verify()
    assert ok.returncode == 0 and "current" in ok.stdout
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "params",
            "--conf",
            str(REPO / "conf"),
            "build.optimization_level=5",
        ],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    stale = verify()
    assert stale.returncode == 1 and "build.optimization_level: built with 3, now 5" in stale.stdout
    assert stale.stderr.count("\n") == 1
    fake = tmp_path / "gpu.json"
    fake.write_text(
        '{"name": "NVIDIA L4", "compute_capability": "8.9", "memory_mib": 23034,'
        ' "_driver": "580.1", "_cuda_driver": "13.0"}'
    )
    subprocess.run(
        [sys.executable, "-m", "pipeline", "params", "--conf", str(REPO / "conf")],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    foreign = subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", engine],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**env, "TRT_PIPELINE_GPU_PROBE": str(fake)},
    )
    assert foreign.returncode == 1 and "fingerprint.gpu" in foreign.stdout


def test_reproduce_reports_identical_or_what_differs(tmp_path, built_transformer):
    _, layout = built_transformer
    repo = prepared_copy(layout, tmp_path / "r")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRT_PIPELINE_STORE": str(tmp_path / "store")}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "params",
            "--conf",
            str(REPO / "conf"),
            "model=transformer",
        ],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    assert subprocess.run([sys.executable, "-m", "stages.build"], cwd=repo, env=env).returncode == 0
    fp = stages.read_fingerprint(layout)["id"]
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "reproduce", f"artifacts/build/{fp}"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode in (0, 2), r.stderr
    assert r.stdout.startswith("identical") if r.returncode == 0 else "bytes differ" in r.stdout


def test_compare_bytes_finds_every_differing_run():
    from pipeline.engine.verify import compare_bytes

    a = bytes(range(256)) * 10
    b = bytearray(a)
    b[5] ^= 1
    b[6] ^= 1
    b[2000] ^= 3
    report = compare_bytes(a, bytes(b))
    assert (
        report["identical"] is False
        and report["differing_bytes"] == 3
        and report["first_difference"] == 5
    )
    assert [(r["offset"], r["length"]) for r in report["runs"]] == [(5, 2), (2000, 1)]
    assert compare_bytes(a, a + b"xy")["differing_bytes"] == 2
    assert compare_bytes(a, a) == {"identical": True, "bytes": len(a)}
