"""A hit trusts a verified file whose (size, mtime_ns, inode) are unchanged since it was
known whole, and hashes it again otherwise (pipeline.store._stat)."""

import json
import os

import pytest

from pipeline.core import hashing
from pipeline.store import FileOnDisk, VerifiedStore, _stat

KEY = "ab" * 32
BIG = os.urandom(3 << 20)

pytestmark = pytest.mark.skipif(_stat.boot_id() is None, reason="no Linux boot id")


@pytest.fixture
def hashed(monkeypatch):
    """The files the store reads to hash them, in order."""
    seen = []
    real = hashing.sha256_file

    def counting(path, *a, **k):
        seen.append(os.path.basename(path))
        return real(path, *a, **k)

    monkeypatch.setattr(hashing, "sha256_file", counting)
    return seen


def put(store, files=None):
    with store.lock(KEY):
        return store.put(KEY, files or {"engine.plan": BIG, "small.json": b"{}"}, {})


def test_a_hit_on_a_fresh_entry_reads_no_file(tmp_path, hashed):
    store = VerifiedStore(tmp_path, required=("engine.plan",))
    entry = put(store)
    assert store.get(KEY) is not None and store.get(KEY) is not None
    assert hashed == []
    assert store.problems(KEY) == [] and sorted(hashed) == ["engine.plan", "small.json"]
    record = json.loads((entry.path / _stat.RECORD).read_text())
    assert set(record[_stat.boot_id()]) == {"engine.plan", "small.json"}


def test_a_changed_stat_is_hashed_again_then_trusted_again(tmp_path, hashed):
    store = VerifiedStore(tmp_path, required=("engine.plan",))
    engine = put(store).file("engine.plan")
    st = engine.stat()
    os.utime(engine, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))  # same bytes, older mtime
    assert store.get(KEY) is not None and hashed == ["engine.plan"]
    assert store.get(KEY) is not None and hashed == ["engine.plan"], "recorded once re-hashed"


def test_a_just_written_file_is_not_recorded(tmp_path, hashed):
    """Its mtime tick is still open: a write in it could keep the same stat."""
    store = VerifiedStore(tmp_path, required=("engine.plan",))
    engine = put(store).file("engine.plan")
    os.utime(engine)  # now
    for _ in range(2):
        assert store.get(KEY) is not None
    assert hashed == ["engine.plan", "engine.plan"]


def test_an_edit_in_place_of_the_same_size_is_caught_at_once(tmp_path):
    store = VerifiedStore(tmp_path, required=("engine.plan",))
    engine = put(store).file("engine.plan")
    with open(engine, "r+b") as f:  # same inode, same size, new mtime
        f.write(b"\0" * 16)
    assert store.get(KEY) is None
    with store.lock(KEY):
        assert store.get(KEY) is None
    assert store.keys() == []  # moved aside, to be rebuilt


def test_truncation_is_caught_without_a_read(tmp_path, hashed):
    store = VerifiedStore(tmp_path, required=("engine.plan",))
    engine = put(store).file("engine.plan")
    os.truncate(engine, 100)
    assert store.fetch(KEY)[1] == [f"engine.plan is 100 bytes, expected {len(BIG)} (truncated?)"]
    assert hashed == []


def test_a_record_of_another_boot_or_a_forged_one_is_not_trusted(tmp_path, hashed):
    store = VerifiedStore(tmp_path, required=("engine.plan",))
    entry = put(store)
    path = entry.path / _stat.RECORD
    record = json.loads(path.read_text())
    path.write_text(json.dumps({"another-boot": record[_stat.boot_id()]}))
    assert store.get(KEY) is not None and "engine.plan" in hashed
    hashed.clear()
    path.write_text(json.dumps({_stat.boot_id(): {"engine.plan": "yes"}}))
    assert store.get(KEY) is not None and "engine.plan" in hashed
    hashed.clear()
    path.write_text("[not json")
    assert store.get(KEY) is not None and "engine.plan" in hashed


def test_forged_mtime_passes_a_hit_but_not_cache_verify(tmp_path):
    """The documented limit: bytes changed with the old mtime put back by hand."""
    store = VerifiedStore(tmp_path, required=("engine.plan",))
    engine = put(store).file("engine.plan")
    st = engine.stat()
    with open(engine, "r+b") as f:
        f.write(b"\0" * 16)
    os.utime(engine, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.get(KEY) is not None
    assert store.problems(KEY) == ["engine.plan sha256 mismatch"]


def test_a_file_on_disk_is_hashed_while_it_is_copied(tmp_path, hashed):
    src = tmp_path / "weights.bin"
    src.write_bytes(BIG)
    store = VerifiedStore(tmp_path / "store", required=("w.bin",))
    entry = put(store, {"w.bin": FileOnDisk(src)})
    assert hashed == []  # no second read to hash it
    assert entry.meta["files"]["w.bin"] == {
        "bytes": len(BIG),
        "sha256": hashing.sha256_bytes(BIG),
    }
    assert entry.file("w.bin").read_bytes() == BIG
    assert os.stat(entry.file("w.bin")).st_ino != os.stat(src).st_ino  # a copy: onnx


def test_a_hard_link_to_a_recorded_file_is_vouched_for_a_copy_is_not(tmp_path):
    store = VerifiedStore(tmp_path / "store", required=("engine.plan",))
    entry = put(store)
    sha = hashing.sha256_bytes(BIG)
    linked, copied = tmp_path / "linked.plan", tmp_path / "copied.plan"
    entry.link_to("engine.plan", linked)
    copied.write_bytes(BIG)
    assert _stat.vouches(entry.path, "engine.plan", linked, sha)
    assert not _stat.vouches(entry.path, "engine.plan", copied, sha)
    assert not _stat.vouches(entry.path, "engine.plan", linked, "0" * 64)
    assert not _stat.vouches(entry.path, "small.json", linked, sha)
    os.utime(linked)  # the same inode changed: the record no longer holds
    assert not _stat.vouches(entry.path, "engine.plan", linked, sha)


def test_a_hit_links_the_engine_and_copies_the_small_files(tmp_path):
    """An edit in place of a served manifest stays in that workspace: the store's entry and
    every other workspace it served keep theirs (the engine, linked, is the same inode)."""
    store = VerifiedStore(tmp_path / "store", required=("engine.plan",))
    entry = put(store)
    for workspace in ("a", "b"):
        got = store.get_or_make(KEY, lambda: pytest.fail("a hit makes nothing"))
        (tmp_path / workspace).mkdir()
        for name in got.names:
            got.copy_to(name, tmp_path / workspace / name)
    a, b = tmp_path / "a", tmp_path / "b"
    assert os.path.samefile(a / "engine.plan", entry.file("engine.plan"))
    assert not os.path.samefile(a / "small.json", entry.file("small.json"))
    (a / "small.json").write_text('{"edited": 1}')
    assert (b / "small.json").read_text() == "{}" and store.problems(KEY) == []
