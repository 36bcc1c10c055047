"""A store entry whose describing files are still being made: the store writes the engine
first, waits for the rest, and a failure while making them leaves no entry."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline.engine.store import EngineStore
from pipeline.store import PendingFiles
from tests.helpers import KEY, manifest_bytes

ENGINE = b"engine-bytes" * 100


def test_the_engine_is_written_before_the_rest_is_made(tmp_path):
    store = EngineStore(tmp_path)
    engine_seen = threading.Event()

    def later():
        # Made only once the store has written the engine: a put that waited for these
        # files before writing the engine would time out here instead.
        deadline = threading.Event()
        for _ in range(200):
            if any((tmp_path / "tmp").glob("*/engine.plan")):
                engine_seen.set()
                break
            deadline.wait(0.05)
        return {"manifest.json": manifest_bytes(KEY, ENGINE)}

    with ThreadPoolExecutor(1) as pool:
        files = PendingFiles({"engine.plan": ENGINE}, pool.submit(later), ("manifest.json",))
        with store.lock(KEY):
            store.put(KEY, files, {"model": "m"})
    assert engine_seen.is_set()
    assert store.get(KEY).file("engine.plan").read_bytes() == ENGINE


def test_a_failure_while_making_the_rest_leaves_no_entry(tmp_path):
    store = EngineStore(tmp_path)

    def later():
        raise ValueError("the build log could not be analysed")

    with ThreadPoolExecutor(1) as pool:
        files = PendingFiles({"engine.plan": ENGINE}, pool.submit(later), ("manifest.json",))
        with store.lock(KEY), pytest.raises(ValueError, match="could not be analysed"):
            store.put(KEY, files, {"model": "m"})
    assert store.get(KEY) is None and store.keys() == []
    assert not list((tmp_path / "tmp").iterdir())


def test_files_other_than_promised_are_an_error():
    with ThreadPoolExecutor(1) as pool:
        files = PendingFiles(
            {"engine.plan": ENGINE}, pool.submit(lambda: {"other.json": b"{}"}), ("manifest.json",)
        )
        assert list(files) == ["engine.plan", "manifest.json"] and len(files) == 2
        with pytest.raises(RuntimeError, match="not the promised"):
            files["manifest.json"]
        with pytest.raises(KeyError):
            files["nothing"]
