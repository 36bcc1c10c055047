"""`python -m pipeline cache|verify|reproduce`: look after the engine store."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pipeline.engine import store as store_lib
from pipeline.core import tables
from pipeline.core.numbers import size
from pipeline.core.errors import PipelineError


def cache_ls(store: store_lib.EngineStore, as_json: bool) -> int:
    rows = []
    for key in store.keys():
        e = store.entry_unverified(key)
        if e is None:
            rows.append({"key": key, "state": "unreadable"})
            continue
        lab = e.meta.get("labels", {})
        rows.append({"key": key, "model": lab.get("model"), "precision": lab.get("precision"), "gpu": lab.get("gpu"),
                     "trt": lab.get("trt"), "bytes": e.size, "last_used": e.last_used})
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"engine store {store.root} is empty")
        return 0
    print(tables.text([[r["key"][:16], r.get("model", "?"), r.get("precision", "?"), r.get("gpu", "?"), r.get("trt", "?"),
                  size(r.get("bytes", 0)), time.strftime("%Y-%m-%d %H:%M", time.localtime(r.get("last_used", 0)))]
                 for r in rows], headers=["key", "model", "precision", "GPU", "TensorRT", "size", "last used"]))
    print(f"{len(rows)} entries, {size(sum(r.get('bytes', 0) for r in rows))} in {store.root}")
    return 0


def cache_verify(store: store_lib.EngineStore) -> int:
    removed = store.clean_tmp()
    bad = {}
    for key in store.keys():
        problems = store.problems(key)
        if problems:
            bad[key] = problems
    for p in removed:
        print(f"removed unfinished write {p.name}")
    for key, problems in bad.items():
        moved = store.quarantine(key)
        print(f"{key[:16]}  CORRUPT: {'; '.join(problems)} (moved to {moved})")
    n = len(store.keys())
    if bad:
        raise PipelineError(f"{len(bad)} corrupt entries moved to quarantine; {n} good entries remain")
    print(f"{n} entries verified, all intact")
    return 0


def cache_prune(store: store_lib.EngineStore, max_size: str) -> int:
    removed = store_lib.prune(store, store_lib.parse_size(max_size))
    for key in removed:
        print(f"removed {key[:16]}")
    print(f"{len(removed)} entries removed")
    return 0


def cache_rm(store: store_lib.EngineStore, key: str) -> int:
    full = store.resolve(key)
    store.remove(full)
    print(f"removed {full}")
    return 0


def _current_context(params: str):
    from pipeline.core import config
    from pipeline.machine import fingerprint
    from pipeline.core.layout import Layout

    cfg = config.load(params)
    return cfg, Layout(Path(".")), fingerprint.collect(cfg.build)


def verify_engine(path: str, params: str) -> int:
    from pipeline.engine import verify

    from pipeline import upstream

    folder = verify.engine_folder(path)
    cfg, layout, fp = _current_context(params)
    reasons = upstream.chain_reasons(cfg, layout) + verify.reasons_not_current(folder, cfg, layout, fp)
    if reasons:
        for r in reasons:
            print(f"  - {r}")
        raise PipelineError(f"{folder} is not current for the present inputs and this machine "
                            f"({len(reasons)} reason{'s' * (len(reasons) > 1)} above)")
    print(f"{folder}: current for the present inputs and this machine ({fp['id']})")
    return 0


def reproduce_engine(path: str, params: str) -> int:
    """Rebuild from the present inputs (bypassing the store) and compare bytes."""
    from pipeline.engine import build as build_lib, timing_cache, verify

    folder = verify.engine_folder(path)
    cfg, layout, fp = _current_context(params)
    reasons = verify.reasons_not_current(folder, cfg, layout, fp)
    if reasons:
        raise PipelineError(f"{folder} is not current ({reasons[0]}); reproduce compares like with like only")
    onnx_path = layout.calibrate_dir / "model.onnx"
    resolved = build_lib.resolve_profiles(cfg.profile, onnx_path)
    tcache = timing_cache.TimingCache.for_fingerprint(cfg.build.store_dir, fp["id"],
                                                      "read" if cfg.build.timing_cache != "off" else "off")
    result = build_lib.build_engine(onnx_path, cfg.precision, cfg.build, resolved, fp["trt_flavour"],
                                    progress=sys.stderr.isatty(), timing_cache=tcache)
    report = verify.compare_bytes((folder / "engine.plan").read_bytes(), result.engine)
    if report["identical"]:
        print(f"identical: the rebuild gives the same {report['bytes']:,} bytes")
        return 0
    print(f"differs: sizes {report['sizes'][0]:,} vs {report['sizes'][1]:,} bytes, "
          f"{report['differing_bytes']:,} bytes differ, first at offset {report['first_difference']:,}")
    for run in report["runs"]:
        print(f"  @{run['offset']:>9,} ({run['length']} bytes)\n      stored : {run['a']}\n      rebuilt: {run['b']}")
    if report["more_runs"]:
        print(f"  … {report['more_runs']} more differing runs")
    return 2
