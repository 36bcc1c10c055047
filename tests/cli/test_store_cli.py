"""`python -m pipeline cache ...` as a user runs it: damaged entries are reported, not
tracebacks; sizes need units; dry runs; each action's own help; where the store is.
Each error is one stderr line and exit 1; the store is clean for `cache verify` after."""

import json
import os

import pytest

from pipeline.engine.store import EngineStore
from pipeline.store import CALIBRATION, ENGINES
from tests.helpers import KEY, OTHER, assert_clean, cli, damage_entry, one_error_line, put


@pytest.mark.parametrize("damage", ["[]", "{}", "null", "escape", "manifest{}", "symlink"])
def test_ls_and_verify_report_a_damaged_entry_and_repair_moves_it(tmp_path, damage):
    store = EngineStore(tmp_path / "store")
    put(store, OTHER)
    damage_entry(put(store), damage)
    ls = cli(tmp_path, "cache", "ls", "--store", str(store.root))
    assert ls.returncode == 0 and ls.stderr == "", ls.stderr
    assert OTHER[:16] in ls.stdout and KEY[:16] in ls.stdout
    # ls reads entry.json only (no re-hashing): damage there shows; verify finds the rest
    listed_damaged = damage in ("[]", "{}", "null", "escape")
    assert ("damaged" in ls.stdout) == listed_damaged
    as_json = json.loads(cli(tmp_path, "cache", "ls", "--json", "--store", str(store.root)).stdout)
    assert {r["key"]: r["state"] == "ok" for r in as_json} == {KEY: not listed_damaged, OTHER: True}
    one_error_line(
        cli(tmp_path, "cache", "verify", "--store", str(store.root)), "1 of 2 entries damaged"
    )
    repaired = cli(tmp_path, "cache", "verify", "--repair", "--store", str(store.root))
    assert repaired.returncode == 0 and "moved to" in repaired.stdout and repaired.stderr == ""
    assert store.keys() == [OTHER]
    assert (
        not (tmp_path / "OUTSIDE.txt").exists() or damage == "escape"
    )  # made by the test, never read as an entry
    assert_clean(store.root, tmp_path)


def test_sizes_need_a_unit_and_prune_can_dry_run(tmp_path):
    store = EngineStore(tmp_path / "store")
    put(store)
    put(store, OTHER)
    s = str(store.root)
    one_error_line(cli(tmp_path, "cache", "prune", "--max-size", "5", "--store", s), "'5'", "unit")
    one_error_line(
        cli(tmp_path, "cache", "prune", "--max-size", "1.2.3G", "--store", s), "'1.2.3G'"
    )
    assert store.keys() == sorted([KEY, OTHER])
    for size in ("5G", "500M"):
        r = cli(tmp_path, "cache", "prune", "--max-size", size, "--store", s)
        assert r.returncode == 0 and "0 entries removed" in r.stdout
    dry = cli(tmp_path, "cache", "prune", "--max-size", "1K", "--dry-run", "--store", s)
    assert dry.returncode == 0 and dry.stdout.count("would remove ") == 2 and len(store.keys()) == 2
    gone = cli(tmp_path, "cache", "prune", "--max-size", "1K", "--store", s)
    assert gone.returncode == 0 and "2 entries removed" in gone.stdout and store.keys() == []
    assert not list(store.locks.iterdir()), "prune leaves no lock files"
    assert_clean(store.root, tmp_path)


def test_stale_lock_files_are_reported_and_removed_by_repair(tmp_path):
    store = EngineStore(tmp_path / "store")
    put(store)
    store.locks.mkdir(exist_ok=True)
    (store.locks / f"{KEY}.lock").write_text("12345\n")  # a killed holder's
    (store.locks / f"{OTHER}.owner").write_text("12345\n")  # an older version's
    r = cli(tmp_path, "cache", "verify", "--store", str(store.root))
    assert r.returncode == 0 and "2 stale lock files" in r.stdout
    r = cli(tmp_path, "cache", "verify", "--repair", "--store", str(store.root))
    assert r.returncode == 0 and r.stdout.count("removed stale lock file") == 2
    assert not list(store.locks.iterdir())


def test_each_action_has_its_own_help(tmp_path):
    for action, needle in (
        ("ls", "--json"),
        ("prune", "--max-size"),
        ("rm", "--dry-run"),
        ("verify", "--repair"),
        ("info", "who can read"),
    ):
        r = cli(tmp_path, "cache", action, "--help")
        assert r.returncode == 0 and f"cache {action}" in r.stdout and needle in r.stdout, (
            action,
            r.stdout,
        )
    assert "--max-size" not in cli(tmp_path, "cache", "ls", "--help").stdout


def test_a_store_path_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "store").write_text("not a folder")
    for args in (("ls",), ("verify",), ("prune", "--max-size", "1G"), ("info",)):
        one_error_line(
            cli(tmp_path, "cache", *args, "--store", str(tmp_path / "store")), "is not a folder"
        )
    one_error_line(
        cli(tmp_path, "cache", "ls", env={"TRT_PIPELINE_STORE": str(tmp_path / "store")}),
        str(tmp_path / "store"),
    )


def test_info_says_where_the_caches_are_and_who_can_read_them(tmp_path):
    env = {
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "TRT_PIPELINE_STORE": "",
        "TRT_PIPELINE_CALIB_CACHE": "",
    }
    r = cli(tmp_path, "cache", "info", env=env)
    assert r.returncode == 0, r.stderr
    assert f"engine store: {tmp_path / 'xdg' / 'trt-pipeline' / 'engines'}" in r.stdout
    assert f"calibration cache: {tmp_path / 'xdg' / 'trt-pipeline' / 'calibration'}" in r.stdout
    store = EngineStore(tmp_path / "xdg" / "trt-pipeline" / "engines")
    old = os.umask(0o002)
    try:
        put(store)
    finally:
        os.umask(old)
    info = json.loads(cli(tmp_path, "cache", "info", "--json", env=env).stdout)[0]
    assert info["entries"] == 1 and info["bytes"] > 1200 and info["mode"] == "drwxrwxr-x"
    assert "reads and writes" in info["access"] and info["chosen_by"] == "user cache folder"
    moved = json.loads(
        cli(
            tmp_path, "cache", "info", "--json", env={**env, "TRT_PIPELINE_STORE": "elsewhere"}
        ).stdout
    )
    assert moved[0]["chosen_by"] == "$TRT_PIPELINE_STORE" and moved[0]["exists"] is False
    (tmp_path / ".cache" / "engines" / "entries").mkdir(
        parents=True
    )  # the old per-repository default
    note = cli(tmp_path, "cache", "info", env=env).stdout.splitlines()[0]
    assert note.startswith("note: .cache/engines") and "TRT_PIPELINE_STORE=.cache/engines" in note


def test_default_locations_follow_xdg_and_can_be_overridden(monkeypatch, tmp_path):
    monkeypatch.delenv("TRT_PIPELINE_STORE", raising=False)
    monkeypatch.delenv(CALIBRATION.env, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ENGINES.root() == tmp_path / "xdg" / "trt-pipeline" / "engines"
    assert CALIBRATION.root(None) == tmp_path / "xdg" / "trt-pipeline" / "calibration"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert ENGINES.root() == tmp_path / "home" / ".cache" / "trt-pipeline" / "engines"
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "env"))
    assert ENGINES.location() == (tmp_path / "env", "$TRT_PIPELINE_STORE")
    assert ENGINES.root("~/team") == tmp_path / "home" / "team"


@pytest.mark.parametrize("command", ["verify", "diff"])
@pytest.mark.parametrize("body", ["{}", "[]", "null", '{"engine": {"file": "../../etc/passwd"}}'])
def test_a_damaged_manifest_given_to_verify_or_diff_is_one_line(tmp_path, command, body):
    folder = tmp_path / "build"
    folder.mkdir()
    (folder / "manifest.json").write_text(body)
    (folder / "engine.plan").write_bytes(b"x")
    args = (
        ("verify", str(folder / "engine.plan"))
        if command == "verify"
        else ("diff", str(folder), str(folder))
    )
    one_error_line(cli(tmp_path, *args), "is not a build manifest")


def test_ls_prints_labels_as_plain_cells(tmp_path):
    """Labels come from entry.json: terminal escapes and newlines are not passed through."""
    store = EngineStore(tmp_path / "store")
    put(store, labels={"model": "evil\x1b[2J\nname", "precision": ["a", "list"], "gpu": "x" * 200})
    r = cli(tmp_path, "cache", "ls", "--store", str(store.root))
    assert r.returncode == 0 and "\x1b" not in r.stdout and "evil?[2J?name" in r.stdout
    assert len(r.stdout.splitlines()) == 4  # header, rule, one row, summary
