"""The engine store under the real build stage (`python -m stages.build`, real
TensorRT-RTX builds on the CPU), as a user meets it: damaged or escaping entries,
a forged engine in artifacts/build, a read-only store, a full disk, a store path
that is a file. Each asserts the stderr lines, the exit status, and a store that
`cache verify` calls clean afterwards."""

import contextlib
import json
import os
import subprocess
import sys

import pytest

from pipeline.core import config, fileio
from pipeline.core.layout import Layout
from pipeline.engine import cache_key
from pipeline.engine.store import EngineStore
from pipeline.flow import stages
from tests.conftest import REPO
from tests.helpers import assert_clean, cli, damage_entry, one_error_line, prepared_copy


def workspace(built, dest, *overrides):
    """A repository-like folder with the built model's fingerprint/export/calibrate
    outputs and a params.yaml composed from conf/ with `overrides`."""
    _, layout = built
    repo = prepared_copy(layout, dest)
    set_params(repo, *overrides)
    return repo


def set_params(repo, *overrides):
    r = cli(repo, "params", "--conf", str(REPO / "conf"), *overrides)
    assert r.returncode == 0, r.stderr


def build(repo, store):
    return subprocess.run(
        [sys.executable, "-m", "stages.build"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "TRT_PIPELINE_STORE": str(store)},
    )


def warnings(r):
    return [line for line in r.stderr.splitlines() if line.startswith("warning:")]


def engine_dir(repo):
    return Layout(repo).engine_dir(stages.read_fingerprint(Layout(repo))["id"])


@pytest.mark.parametrize("damage", ["escape", "[]", "{}", "null", "manifest_escape"])
def test_a_damaged_or_escaping_entry_is_refused_moved_aside_and_rebuilt(
    tmp_path, built_cnn, damage
):
    repo = workspace(built_cnn, tmp_path / "r")
    store_dir = tmp_path / "s" / "store"
    assert build(repo, store_dir).returncode == 0
    store = EngineStore(store_dir)
    [key] = store.keys()
    damage_entry(store.entry_unverified(key)[0], damage)
    r = build(repo, store_dir)
    assert r.returncode == 0, r.stderr
    [warning] = warnings(r)
    assert "damaged" in warning and "moved to" in warning
    # rebuilt, or the workspace's own intact engine adopted again
    assert (
        "engine store miss, built" in r.stderr or "engine store adopted" in r.stderr
    ) and "Traceback" not in r.stderr
    assert not (tmp_path / "r" / "OUTSIDE.txt").exists() and not (tmp_path / "OUTSIDE.txt").exists()
    assert sorted(p.name for p in engine_dir(repo).iterdir()) == sorted(store.get(key).files)
    assert_clean(store_dir, tmp_path)


@pytest.mark.parametrize("forgery", ["cache_key", "cache_key+key_inputs"])
def test_a_forged_engine_in_artifacts_is_not_adopted(tmp_path, built_cnn, forgery):
    repo = workspace(built_cnn, tmp_path / "r")
    assert (
        build(repo, tmp_path / "store1").returncode == 0
    )  # an engine built at optimization level 3
    set_params(repo, "build.optimization_level=5")
    cfg = config.load(repo / "params.yaml")
    key_in = cache_key.engine_key_inputs(cfg, Layout(repo), stages.read_fingerprint(Layout(repo)))
    manifest_path = engine_dir(repo) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["cache_key"] = cache_key.cache_key(key_in)
    if forgery == "cache_key+key_inputs":
        manifest["key_inputs"] = key_in
    manifest_path.write_text(json.dumps(manifest))
    r = build(repo, tmp_path / "store2")
    assert r.returncode == 0, r.stderr
    [warning] = warnings(r)
    assert warning.startswith(
        f"warning: not adopting {manifest_path.parent.relative_to(repo) / 'engine.plan'}"
    )
    assert (
        "cache_key is not the key of its own recorded inputs"
        if forgery == "cache_key"
        else "disagree with its own manifest (build.optimization_level)"
    ) in warning
    assert "engine store miss, built" in r.stderr
    built = fileio.read_json(manifest_path)
    assert (
        built["key_inputs"]["build"]["optimization_level"] == 5
        and built["config"]["build"]["optimization_level"] == 5
    )
    assert_clean(tmp_path / "store2", tmp_path)


def test_an_intact_engine_in_artifacts_is_adopted(tmp_path, built_cnn):
    repo = workspace(built_cnn, tmp_path / "r")
    assert build(repo, tmp_path / "store1").returncode == 0
    r = build(repo, tmp_path / "store2")
    assert (
        r.returncode == 0 and "adopted the engine DVC restored" in r.stderr and not warnings(r)
    ), r.stderr
    assert_clean(tmp_path / "store2", tmp_path)
    [row] = json.loads(
        cli(repo, "cache", "ls", "--json", "--store", str(tmp_path / "store2")).stdout
    )
    assert (
        row["model"],
        row["precision"],
        row["profile"],
        row["calibration"],
        row["fallback"],
    ) == ("cnn", "fp32", "dynamic", "-", "-")


@contextlib.contextmanager
def tmpfs(path, size):
    """A small filesystem of our own (root only): a full disk, or remounted read-only."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs (full disk, read-only store)")
    path.mkdir(parents=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def test_a_read_only_store_serves_hits_and_builds_misses_into_the_workspace(tmp_path, built_cnn):
    repo = workspace(built_cnn, tmp_path / "r")
    with tmpfs(tmp_path / "ro", "64m") as store_dir:
        assert build(repo, store_dir).returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(store_dir)], check=True)
        other = workspace(built_cnn, tmp_path / "r2")
        hit = build(other, store_dir)
        assert hit.returncode == 0 and "engine store hit" in hit.stderr and not warnings(hit), (
            hit.stderr
        )
        set_params(other, "build.optimization_level=5")
        miss = build(other, store_dir)
        assert miss.returncode == 0, miss.stderr
        [warning] = warnings(miss)
        assert "is not writable (Read-only file system" in warning
        assert str(engine_dir(other).relative_to(other)) in warning
        assert "Traceback" not in miss.stderr
        manifest = fileio.read_json(engine_dir(other) / "manifest.json")
        assert manifest["config"]["build"]["optimization_level"] == 5
        [key] = EngineStore(store_dir).keys()
        one_error_line(
            cli(tmp_path, "cache", "rm", key, "--store", str(store_dir)),
            "not writable",
            "Read-only file system",
        )
        one_error_line(
            cli(tmp_path, "cache", "prune", "--max-size", "1B", "--store", str(store_dir)),
            "not writable",
        )
        assert_clean(store_dir, tmp_path)


def test_a_full_disk_is_one_line_and_leaves_nothing_behind(tmp_path, built_cnn):
    # The size check before writing catches it; the write's own ENOSPC path is covered by
    # test_a_full_disk_anywhere_is_one_line_naming_the_file below.
    repo = workspace(built_cnn, tmp_path / "r")
    with tmpfs(tmp_path / "full", "16k") as store_dir:
        r = build(repo, store_dir)
        line = one_error_line(r, "not enough disk for the engine", str(store_dir), "free")
        assert "Traceback" not in r.stderr, line
        assert not engine_dir(repo).exists()
        # the check comes before the store makes its folders; nothing is left if it did
        assert not list((store_dir / "tmp").glob("*")) and not list((store_dir / "locks").glob("*"))
        assert EngineStore(store_dir).keys() == []
        assert_clean(store_dir, tmp_path)


def test_a_store_path_that_is_a_file_stops_the_build_in_one_line(tmp_path, built_cnn):
    repo = workspace(built_cnn, tmp_path / "r")
    (tmp_path / "store").write_text("a file")
    one_error_line(
        build(repo, tmp_path / "store"), f"engine store {tmp_path / 'store'} is not a folder"
    )
    assert not engine_dir(repo).exists()


def test_a_full_disk_anywhere_is_one_line_naming_the_file(tmp_path):
    with tmpfs(tmp_path / "full", "16k") as disk:
        with contextlib.suppress(OSError):
            (disk / "filler").write_bytes(b"x" * 64 * 1024)
        r = cli(
            tmp_path, "params", "--conf", str(REPO / "conf"), "--out", str(disk / "params.yaml")
        )
        one_error_line(r, f"{disk / 'params.yaml'}: No space left on device")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_a_read_only_calibration_cache_still_calibrates_with_one_warning(tmp_path, built_cnn):
    repo = workspace(built_cnn, tmp_path / "r", "precision=int8")
    with tmpfs(tmp_path / "ro", "4m") as cache:
        subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True)
        r = subprocess.run(
            [sys.executable, "-m", "stages.calibrate"],
            cwd=repo,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO), "TRT_PIPELINE_CALIB_CACHE": str(cache)},
        )
        assert r.returncode == 0, r.stderr
        [warning] = warnings(r)
        assert (
            "calibration cache" in warning and "not writable" in warning and "not cached" in warning
        )
        summary = fileio.read_json(repo / "artifacts/calibrate/calibration.json")
        assert summary["calibration"]["cache"]["hit"] is False
        assert summary["calibration"]["quantize_linear_nodes"] > 0


def test_an_entry_removed_while_a_hit_copies_it_is_looked_up_again(
    tmp_path, built_cnn, monkeypatch, capsys
):
    """`cache rm` or `prune` in one terminal while a build hits in another."""
    import shutil

    from pipeline.store import _entry

    cfg, layout = built_cnn
    repo = prepared_copy(layout, tmp_path / "r")
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "store"))
    stages.build(cfg, Layout(repo), progress=False)
    store = EngineStore(tmp_path / "store")
    [key] = store.keys()
    copy_to, removed = _entry.Outcome.copy_to, []

    def removed_meanwhile(self, name, dest):
        if not removed:
            removed.append(shutil.rmtree(store.entries / key))
        return copy_to(self, name, dest)

    monkeypatch.setattr(_entry.Outcome, "copy_to", removed_meanwhile)
    capsys.readouterr()
    manifest = stages.build(cfg, Layout(repo), progress=False)
    assert removed and manifest["cache_key"] == key and store.keys() == [key]
    assert "engine store adopted" in capsys.readouterr().err  # the workspace's own intact engine
