"""Job reuse for Hydra sweeps: DVC's run cache, for jobs that DVC does not run.

A sweep job whose every input matches a job that finished before is not run again:
its outputs come back from the store and its result says so ("job reused"). The
inputs are what `dvc repro` would compare: the whole config, the content of every
dependency dvc.yaml lists (all code, the model files, the calibration and reference
data; templated paths filled in from the config), the versions of the libraries that
shape a result, and this machine's fingerprint id, so measurements are only reused
on the same GPU model, driver and TensorRT.

    <engine store>/jobs/entries/<key>/   the job's artifacts and metrics, result.json

The engine is not copied into the entry: the job's result names its engine store key
and the engine comes from there, so a pruned engine makes the job run again. Set
`sweep.reuse=false` to measure again anyway (builds still hit the engine store)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path, PurePosixPath
from typing import Any, Callable
from urllib.parse import quote, unquote

from pipeline.core import config as config_lib, fileio, hashing
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.core.verified_store import StoreNotWritable, VerifiedStore
from pipeline.engine import store as engine_store

RESULT = "result.json"
JOBS = "jobs"
REUSED = "job reused"
# Libraries whose version can change an export, a calibration or a measurement
# (TensorRT's own version is in the fingerprint id).
LIBRARIES = ("onnx", "onnxruntime", "torch", "nvidia-modelopt", "polygraphy", "numpy", "onnxconverter-common")
# Saved per job; the engine folder comes from the engine store and the fingerprint
# is this machine's own, freshly probed.
KEPT = ("artifacts", "metrics")
# The sweep's own code, beside what the DVC stages run: it shapes result.json.
SWEEP_CODE = ("pipeline/run.py", "pipeline/job_cache.py")
_TEMPLATE = re.compile(r"^\$\{([\w.]+)\}$")


def job_store(cfg: Any) -> VerifiedStore:
    return store_beside(engine_store.default_root(cfg.build.store_dir))


def store_beside(engine_root: Path) -> VerifiedStore:
    """Inside the engine store, so whoever shares the engines (a team, a cluster) shares these."""
    return VerifiedStore(Path(engine_root) / JOBS, required=(RESULT,), what="job store")


def drop_orphans(engine_root: Path, engine_keys: set[str], dry_run: bool = False) -> list[str]:
    """Saved jobs whose engine left the engine store (`cache prune`, `cache rm`): they can
    never be restored, so they go with it (their ONNX files may outweigh the engine)."""
    jobs, gone = store_beside(engine_root), []
    for key in jobs.keys():
        entry, _ = jobs.entry_unverified(key)
        try:
            engine_key = fileio.read_json(entry.file(RESULT)).get("cache_key") if entry else None
        except (PipelineError, OSError, AttributeError):
            engine_key = None  # unreadable: left for the next job with this key to repair
        if engine_key is not None and engine_key not in engine_keys:
            if not dry_run:
                jobs.remove(key)
            gone.append(key)
    return gone


def dvc_deps(repo: Path, cfg: Any) -> list[str]:
    """Every dependency dvc.yaml lists that no stage makes, templated paths filled in."""
    import yaml

    stages = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]
    outs = {next(iter(o)) if isinstance(o, dict) else o
            for s in stages.values() for kind in ("outs", "metrics", "plots") for o in s.get(kind, [])}
    deps = set()
    for stage in stages.values():
        for dep in stage.get("deps", []):
            if m := _TEMPLATE.match(dep):
                from omegaconf import OmegaConf

                dep = OmegaConf.select(cfg, m.group(1), default=None)
                if dep is None:
                    continue
            if not any(dep == o or dep.startswith(f"{o}/") for o in outs):
                deps.add(str(dep))
    return sorted(deps)


def _path_digest(path: Path) -> str | None:
    """sha256 over a file, or over a folder's relative names and file digests (what
    .dvcignore leaves out is left out here too); None when nothing is there."""
    if path.is_file():
        return hashing.sha256_file(path)
    if not path.is_dir():
        return None
    files = {}
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith(".pyc"):
                f = Path(dirpath) / name
                files[f.relative_to(path).as_posix()] = hashing.sha256_file(f)
    return hashing.sha256_json(files)


def key_inputs(repo: Path, cfg: Any, fingerprint_id: str) -> dict:
    config = config_lib.to_dict(cfg)
    config.pop("sweep", None)  # where a job runs and whether it may be reused, not what it makes
    versions = {}
    for lib in LIBRARIES:
        try:
            versions[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            versions[lib] = None
    deps = {d: _path_digest(Path(d) if Path(d).is_absolute() else repo / d)
            for d in [*dvc_deps(repo, cfg), *SWEEP_CODE]}
    return {"config": config, "deps": deps, "libraries": versions, "fingerprint": fingerprint_id}


def _entry_name(rel: str) -> str:
    return quote(rel, safe="")


def _job_path(name: str) -> PurePosixPath | None:
    """The job-relative path an entry file stands for, if it is one this module saves."""
    if name == RESULT:
        return PurePosixPath(RESULT)
    rel = PurePosixPath(unquote(name))
    parts = rel.parts
    if rel.is_absolute() or ".." in parts or len(parts) < 2 or parts[0] not in KEPT:
        return None
    return rel


def _saved(rel: PurePosixPath) -> bool:
    return rel.parts[:2] not in (("artifacts", "build"), ("artifacts", "fingerprint.json"))


def _files(layout: Layout, result: dict) -> dict[str, bytes]:
    files = {RESULT: fileio.to_json(result).encode()}
    for top in KEPT:
        for path in sorted((layout.root / top).rglob("*")):
            rel = PurePosixPath(path.relative_to(layout.root).as_posix())
            if path.is_file() and not path.is_symlink() and _saved(rel):
                files[_entry_name(str(rel))] = path.read_bytes()
    return files


def _restore(entry: Any, cfg: Any, layout: Layout, fp: dict) -> dict | None:
    """The saved result, with every file back in the job folder; None (nothing left
    behind) when the engine it names is no longer in the engine store."""
    result = fileio.read_json(entry.file(RESULT), "saved job result")
    engines = engine_store.EngineStore(engine_store.default_root(cfg.build.store_dir))
    engine = engines.get(str(result.get("cache_key")))
    if engine is None:
        return None
    try:
        for name in entry.files:
            rel = _job_path(name)
            if rel is None:
                raise PipelineError(f"job store entry {entry.key[:16]} holds {name!r}, not a job file")
            if rel.name == RESULT:
                continue
            dest = layout.root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            _link_or_copy(entry.file(name), dest)
        with fileio.staged_dir(layout.engine_dir(fp["id"])) as out:
            for name in engine.files:
                _link_or_copy(engine.file(name), out / name)
    except FileNotFoundError:  # `cache rm` or `prune` took a file meanwhile: run the job
        _clear(layout)
        return None
    except BaseException:
        _clear(layout)
        raise
    return result


def _clear(layout: Layout) -> None:
    """Remove a half-restored job, all but the fingerprint just probed."""
    shutil.rmtree(layout.metrics_dir, ignore_errors=True)
    for p in (layout.root / "artifacts").glob("*"):
        if p != layout.fingerprint:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def _link_or_copy(src: Path, dest: Path) -> None:
    """Hard links share the verified bytes; where a link cannot be made, a copy."""
    dest.unlink(missing_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def reuse_or_run(repo: Path, cfg: Any, layout: Layout, fp: dict, run_job: Callable[[], dict]) -> dict:
    """The job's result: reused when a finished job had the same inputs, else
    `run_job()`'s, saved for the next identical job (one at a time per key)."""
    if not cfg.sweep.reuse:
        return run_job()
    inputs = key_inputs(repo, cfg, fp["id"])
    key = hashing.sha256_json(inputs)
    store = job_store(cfg)
    entry = store.get(key)
    if entry is not None and (result := _restore(entry, cfg, layout, fp)) is not None:
        return _reused(result, key)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(store.lock(key))
        except StoreNotWritable as e:
            print(f"warning: {e}; this job's outputs are not saved for reuse", file=sys.stderr)
            return run_job()
        entry = store.get(key)  # again, under the lock: an identical job may have just finished
        if entry is not None:
            if (result := _restore(entry, cfg, layout, fp)) is not None:
                return _reused(result, key)
            store.remove(key)  # its engine was pruned: run the job again
        result = run_job()
        labels = {"model": cfg.model.name, "precision": cfg.precision.name, "profile": cfg.profile.name,
                  "fingerprint": fp["id"], "job": str(layout.root), "host": socket.gethostname(),
                  "finished": time.time()}
        try:
            store.put(key, _files(layout, result), labels)
        except StoreNotWritable as e:
            print(f"warning: {e}; this job's outputs are not saved for reuse", file=sys.stderr)
        return result


def _reused(result: dict, key: str) -> dict:
    ran = {k: result.get(k) for k in ("host", "node", "store_event")}
    return {**result, "store_event": REUSED, "reused": {"job_key": key, **ran}}
