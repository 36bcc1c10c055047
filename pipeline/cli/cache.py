"""The engine store's upkeep behind `trt-pipeline cache` (its parser: cli/commands/cache.py):
listing, where the stores are, re-hashing, pruning and removing entries."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from pipeline.core import tables
from pipeline.core.errors import PipelineError
from pipeline.core.numbers import size
from pipeline.engine.store import EngineStore, parse_size, prune
from pipeline.store import CALIBRATION, VerifiedStore
from pipeline.sweeps import job_cache

if TYPE_CHECKING:
    import grp
    import pwd

    from pipeline.core.config import PipelineConfig

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

LS_COLUMNS = (
    ("key", "key"),
    ("model", "model"),
    ("precision", "precision"),
    ("profile", "profile"),
    ("calibration", "calibration"),
    ("fallback", "fallback"),
    ("gpu", "GPU"),
    ("trt", "TensorRT"),
)


def cache_ls(store: EngineStore, as_json: bool) -> int:
    """Every entry with what tells it apart; a damaged one says so instead of failing."""
    rows: list[dict[str, Any]] = []
    for key in store.keys():
        e, bad = store.entry_unverified(key)
        if e is None:
            rows.append(
                {"key": key, "state": f"damaged: {'; '.join(bad)}", "bytes": 0, "last_used": 0}
            )
            continue
        rows.append(
            {
                "key": key,
                **{k: e.labels.get(k) for k, _ in LS_COLUMNS[1:]},
                "state": "ok",
                "bytes": e.size,
                "last_used": e.last_used,
            }
        )
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"engine store {store.root} is empty")
        return 0
    table = []
    for r in rows:
        if r["state"] != "ok":
            table.append([r["key"][:16], r["state"]] + [""] * (len(LS_COLUMNS) + 1))
            continue
        table.append(
            [r["key"][:16]]
            + [_cell(r[k]) for k, _ in LS_COLUMNS[1:]]
            + [size(r["bytes"]), time.strftime("%Y-%m-%d %H:%M", time.localtime(r["last_used"]))]
        )
    print(tables.text(table, headers=[h for _, h in LS_COLUMNS] + ["size", "last used"]))
    damaged = sum(r["state"] != "ok" for r in rows)
    print(
        f"{len(rows)} entries, {size(sum(r['bytes'] for r in rows))} in {store.root}"
        + (f"; {damaged} damaged (run `cache verify --repair`)" if damaged else "")
    )
    return 0


def _cell(value: object, width: int = 40) -> str:
    """A label as one printable table cell: labels come from entry.json, not from us."""
    text = "?" if value is None else str(value)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= width else text[: width - 1] + "…"


def who_can_read(path: Path) -> dict[str, str]:
    """Mode, owner and group of a folder, and in words who may read and write it."""
    import grp
    import pwd
    import stat

    st = path.stat()

    def name(lookup: Callable[[int], pwd.struct_passwd | grp.struct_group], ident: int) -> str:
        try:
            return lookup(ident)[0]
        except KeyError:
            return str(ident)

    owner, group = name(pwd.getpwuid, st.st_uid), name(grp.getgrgid, st.st_gid)
    mode = st.st_mode
    rights = []
    for who, r, w in (
        ("owner " + owner, stat.S_IRUSR, stat.S_IWUSR),
        ("group " + group, stat.S_IRGRP, stat.S_IWGRP),
        ("everyone", stat.S_IROTH, stat.S_IWOTH),
    ):
        if mode & r:
            rights.append(f"{who} {'reads and writes' if mode & w else 'reads'}")
    setgid = " (setgid: new files get the group)" if mode & stat.S_ISGID else ""
    return {
        "mode": stat.filemode(mode),
        "owner": owner,
        "group": group,
        "access": "; ".join(rights) + setgid or "nobody but root",
    }


def folder_usage(root: Path, leave_out: Path | None = None) -> int:
    total = 0
    for p in root.rglob("*"):
        if leave_out is not None and p.is_relative_to(leave_out):
            continue
        with contextlib.suppress(OSError):
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
    return total


def cache_info_here(
    st: EngineStore,
    source: str,
    cfg: PipelineConfig | None,
    params: str,
    as_json: bool,
) -> int:
    """`cache info`: the engine store and the calibration cache this config uses, and a
    note on a store left at the old per-repository default."""
    calib, calib_source = CALIBRATION.location(cfg.calibration.cache_dir if cfg else None)
    if calib_source == "setting":
        calib_source = f"calibration.cache_dir in {params}"
    old = [
        f"{p} (the per-repository default before the user cache folder; {len(VerifiedStore(p).keys())} "
        f"entries) is no longer used: set TRT_PIPELINE_STORE={p} to keep using it, or remove it"
        for p in (Path(".cache/engines"),)
        if source == "user cache folder" and (p / "entries").is_dir()
    ]
    return cache_info(
        [
            ("engine store", st, source),
            ("saved sweep jobs", job_cache.store_beside(st.root), "the engine store's location"),
            (
                "calibration cache",
                VerifiedStore(calib, what="calibration cache"),
                calib_source,
            ),
        ],
        as_json,
        notes=old,
    )


def cache_info(
    stores: list[tuple[str, VerifiedStore, str]], as_json: bool, notes: Sequence[str] = ()
) -> int:
    """Where each cache is, what chose it, how big it is and who can read it."""
    out = []
    for label, st, source in stores:
        item: dict[str, Any] = {
            "cache": label,
            "path": str(st.root.resolve()),
            "chosen_by": source,
            "exists": st.root.is_dir(),
        }
        if item["exists"]:
            # the saved jobs live inside the engine store's folder and are counted on their own line
            nested = st.root / job_cache.JOBS if label == "engine store" else None
            item.update(
                entries=len(st.keys()), bytes=folder_usage(st.root, nested), **who_can_read(st.root)
            )
        out.append(item)
    if as_json:
        print(json.dumps(out, indent=2))
        return 0
    for note in notes:
        print(f"note: {note}")
    for item in out:
        print(f"{item['cache']}: {item['path']}  (chosen by {item['chosen_by']})")
        if not item["exists"]:
            print("  not created yet (the first build makes it, following the umask)")
            continue
        print(f"  {item['entries']} entries, {size(item['bytes'])}")
        print(f"  {item['mode']} {item['owner']}:{item['group']}: {item['access']}")
    return 0


def cache_verify(store: EngineStore, repair: bool) -> int:
    """Re-hash every entry. Without --repair only report; with it, move damaged
    entries to quarantine (each under its key's lock), remove unfinished writes of
    dead builders and lock files nobody holds."""
    bad = {key: problems for key in store.keys() if (problems := store.problems(key))}
    if not repair:
        for key, problems in bad.items():
            print(f"{key[:16]}  DAMAGED: {'; '.join(problems)}")
        leftovers = len(store.stale_locks())
        n = len(store.keys())
        if bad:
            raise PipelineError(
                f"{len(bad)} of {n} entries damaged; `cache verify --repair` moves them to quarantine"
            )
        print(
            f"{n} entries verified, all intact"
            + (f"; {leftovers} stale lock files (--repair removes them)" if leftovers else "")
        )
        return 0
    for p in store.clean_tmp():
        print(f"removed unfinished write {p.name}")
    for p in store.clean_locks():
        print(f"removed stale lock file {p.name}")
    for key in bad:
        problems, moved = store.repair(key)
        if moved is not None:
            print(f"{key[:16]}  DAMAGED: {'; '.join(problems)} (moved to {moved})")
    print(f"{len(store.keys())} entries verified, all intact")
    return 0


def cache_prune(store: EngineStore, max_size: str, dry_run: bool) -> int:
    limit = parse_size(max_size)
    removed = prune(store, limit, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for key in removed:
        print(f"{verb} {key[:16]}")
    print(
        f"{len(removed)} entries {'would be removed' if dry_run else 'removed'} to fit in {size(limit)}"
    )
    _drop_orphan_jobs(store, set(store.keys()) - (set(removed) if dry_run else set()), dry_run)
    return 0


def _drop_orphan_jobs(store: EngineStore, kept: set[str], dry_run: bool) -> None:
    gone = job_cache.drop_orphans(store.root, kept, dry_run)
    if gone:
        print(
            f"{'would remove' if dry_run else 'removed'} {len(gone)} saved sweep job(s) whose engine is gone"
        )


def cache_rm(store: EngineStore, key: str, dry_run: bool) -> int:
    full = store.resolve(key)
    if not dry_run:
        store.remove(full)
    print(f"{'would remove' if dry_run else 'removed'} {full}")
    _drop_orphan_jobs(store, set(store.keys()) - {full}, dry_run)
    return 0
