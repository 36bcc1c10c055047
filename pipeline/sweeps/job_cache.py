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

import os
import re
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, cast
from urllib.parse import quote, unquote

from pipeline.core import config, console, dvc_yaml, fileio, hashing
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.engine import store
from pipeline.flow import build_files
from pipeline.records.fingerprint_file import FingerprintRecord
from pipeline.store import ENGINES, VerifiedStore

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.sweeps.job_files import JobResult

RESULT = "result.json"
JOBS = "jobs"
REUSED = "job reused"
# Saved per job; the engine folder comes from the engine store and the fingerprint
# is this machine's own, freshly probed.
KEPT = ("artifacts", "metrics")
# The sweep's own code, beside what the DVC stages run: it shapes result.json.
SWEEP_CODE = ("pipeline/sweeps/job.py", "pipeline/sweeps/job_cache.py")
_TEMPLATE = re.compile(r"^\$\{([\w.]+)\}$")
_KEY = re.compile(r"[0-9a-f]{64}")


class StoredEntry(Protocol):
    """A store entry as this module reads one (a saved job, or the engine it names):
    what pipeline.store's entries give, by name, files and links."""

    @property
    def key(self) -> str: ...
    @property
    def files(self) -> list[str]: ...
    def file(self, name: str) -> Path: ...
    def place(self, name: str, dest: Path) -> None: ...


def job_store(cfg: PipelineConfig) -> VerifiedStore:
    return store_beside(ENGINES.root(cfg.build.store_dir))


def store_beside(engine_root: Path) -> VerifiedStore:
    """Inside the engine store, so whoever shares the engines (a team, a cluster) shares these."""
    return VerifiedStore(Path(engine_root) / JOBS, required=(RESULT,), what="job store")


def drop_orphans(engine_root: Path, engine_keys: set[str], dry_run: bool = False) -> list[str]:
    """Saved jobs whose engine left the engine store (`cache prune`, `cache rm`): they can
    never be restored, so they go with it (their ONNX files may outweigh the engine)."""
    jobs, gone = store_beside(engine_root), []
    for key in jobs.keys():
        entry, _ = jobs.entry_unverified(key)
        found = (
            _saved_result(entry) if entry else None
        )  # unreadable: left for the next job with this key to repair
        engine_key = found[1] if found else None
        if engine_key is not None and engine_key not in engine_keys:
            if not dry_run:
                jobs.remove(key)
            gone.append(key)
    return gone


def dvc_deps(repo: Path, cfg: PipelineConfig) -> tuple[set[str], set[str]]:
    """dvc.yaml's dependencies that no stage makes: those it names, and those it takes
    from the config (templated: ${model.source}, ...), filled in."""
    # a project of several models: each stage's `do` is one model's, `${item.*}` its config
    stages = {n: s.get("do", s) for n, s in dvc_yaml.stages(repo).items()}
    outs = {
        next(iter(o)) if isinstance(o, dict) else o
        for s in stages.values()
        for kind in ("outs", "metrics", "plots")
        for o in s.get(kind, [])
    }
    static: set[str] = set()
    from_config: set[str] = set()
    for stage in stages.values():
        for dep in stage.get("deps", []):
            found = static
            if m := _TEMPLATE.match(dep.replace("${item.", "${")):
                from omegaconf import DictConfig, OmegaConf

                # the config is the DictConfig validate() made, typed as its schema
                selected = OmegaConf.select(cast(DictConfig, cfg), m.group(1), default=None)
                dep, found = selected, from_config
                if dep is None:
                    continue
            if not any(dep == o or dep.startswith(f"{o}/") for o in outs):
                found.add(str(dep))
    return static, from_config


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


class JobKeyInputs(TypedDict):
    """What a job key hashes (job_key): what `dvc repro` would compare, and the machine."""

    config: dict[str, Any]  # the whole config less `sweep`, as plain data
    # each dependency's sha256 (a folder's over its files) by its dvc.yaml name, or
    # "config:<path>" for one a templated path names; None where nothing is there
    deps: dict[str, str | None]
    libraries: dict[str, str]  # the versions that shape a result (build_files.tool_versions)
    fingerprint: str  # this machine's fingerprint id


def key_inputs(repo: Path, cfg: PipelineConfig, fingerprint_id: str) -> JobKeyInputs:
    plain = config.to_dict(cfg)
    plain.pop("sweep", None)  # where a job runs and whether it may be reused, not what it makes
    static, from_config = dvc_deps(repo, cfg)
    where = {d: Path(d) if Path(d).is_absolute() else repo / d for d in static | set(SWEEP_CODE)}
    # A path from the config is read by the job where it runs (hydra.job.chdir is false):
    # relative to the working directory, which is the repository only when run from there.
    where.update({f"config:{d}": Path(d) for d in from_config})
    digests: dict[Path, str | None] = {}  # a folder named both ways (models/) is read once
    deps = {}
    for name, path in sorted(where.items()):
        at = path.resolve()
        if at not in digests:
            digests[at] = _path_digest(path)
        deps[name] = digests[at]
    return {
        "config": plain,
        "deps": deps,
        "libraries": build_files.tool_versions(),
        "fingerprint": fingerprint_id,
    }


def job_key(repo: Path, cfg: PipelineConfig, fingerprint_id: str) -> str:
    return hashing.sha256_json(key_inputs(repo, cfg, fingerprint_id))


def restorable(repo: Path, cfg: PipelineConfig) -> bool:
    """Whether a job with this config would be restored here, not run: a saved job has its
    key and the engine it names is in the engine store. A scheduling hint for the sweeper
    (neither is verified here); reuse_or_run verifies both when it restores."""
    from pipeline.machine import fingerprint

    if not cfg.sweep.reuse:
        return False
    entry, _ = job_store(cfg).entry_unverified(
        job_key(repo, cfg, fingerprint.collect(cfg.build)["id"])
    )
    found = _saved_result(entry) if entry else None
    engines = store.EngineStore(ENGINES.root(cfg.build.store_dir))
    return found is not None and engines.entry_unverified(found[1])[0] is not None


def _saved_result(entry: StoredEntry) -> tuple[JobResult, str] | None:
    """A saved job's result and the engine store key it names, if that is a well-formed
    key (it is read from a file: a key is a sha256, never a path)."""
    try:
        result = fileio.read_json(entry.file(RESULT), "saved job result")
    except (PipelineError, OSError):
        return None
    key = result.get("cache_key") if isinstance(result, dict) else None
    return (
        (cast("JobResult", result), key) if isinstance(key, str) and _KEY.fullmatch(key) else None
    )


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


def _files(layout: Layout, result: JobResult) -> dict[str, bytes]:
    files = {RESULT: fileio.to_json(result).encode()}
    for top in KEPT:
        for path in sorted((layout.root / top).rglob("*")):
            rel = PurePosixPath(path.relative_to(layout.root).as_posix())
            if path.is_file() and not path.is_symlink() and _saved(rel):
                files[_entry_name(str(rel))] = path.read_bytes()
    return files


def _saved_job(
    entry: StoredEntry, engines: store.EngineStore
) -> tuple[JobResult, StoredEntry] | None:
    """A saved job's result and the verified engine store entry it names; None when
    that engine is gone (or the result names none)."""
    found = _saved_result(entry)
    engine = engines.get(found[1]) if found else None
    return (found[0], engine) if found and engine is not None else None


def _restore(
    entry: StoredEntry, engine: StoredEntry, layout: Layout, fp: FingerprintRecord
) -> bool:
    """Every file of the saved job back in the job folder, the engine beside them;
    False (nothing left behind) when a file went missing meanwhile (`cache rm`)."""
    try:
        for name in entry.files:
            rel = _job_path(name)
            if rel is None:
                raise PipelineError(
                    f"job store entry {entry.key[:16]} holds {name!r}, not a job file"
                )
            if rel.name != RESULT:
                (layout.root / rel).parent.mkdir(parents=True, exist_ok=True)
                entry.place(name, layout.root / rel)
        with fileio.staged_dir(layout.engine_dir(fp["id"])) as out:
            for name in engine.files:
                engine.place(name, out / name)
        return True
    except FileNotFoundError:
        _clear(layout)
        return False
    except BaseException:
        _clear(layout)
        raise


def _clear(layout: Layout) -> None:
    """Remove a half-restored job, all but the fingerprint just probed."""
    shutil.rmtree(layout.metrics_dir, ignore_errors=True)
    for p in (layout.root / "artifacts").glob("*"):
        if p != layout.fingerprint:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


class _Ran(TypedDict, total=False):
    result: JobResult  # what run_job() gave, on a miss
    saved: tuple[JobResult, StoredEntry] | None  # the last saved job looked at


def reuse_or_run(
    repo: Path,
    cfg: PipelineConfig,
    layout: Layout,
    fp: FingerprintRecord,
    run_job: Callable[[], JobResult],
) -> JobResult:
    """The job's result: reused when a finished job had the same inputs and its engine
    is still in the engine store, else `run_job()`'s, saved for the next identical job
    (the store's lock: identical jobs run once)."""
    if not cfg.sweep.reuse:
        return run_job()
    key = job_key(repo, cfg, fp["id"])
    engines = store.EngineStore(ENGINES.root(cfg.build.store_dir))
    ran: _Ran = {}

    def make() -> tuple[dict[str, bytes], dict[str, Any], str]:
        ran["result"] = run_job()
        labels = {
            "model": cfg.model.name,
            "precision": cfg.precision.name,
            "profile": cfg.profile.name,
            "fingerprint": fp["id"],
            "job": str(layout.root),
            "host": socket.gethostname(),
            "finished": time.time(),
        }
        return _files(layout, ran["result"]), labels, "ran"

    # keeps what it found: the engine is verified (hashed) once
    def usable(entry: StoredEntry) -> bool:
        ran["saved"] = _saved_job(entry, engines)
        return ran["saved"] is not None

    got = job_store(cfg).get_or_make(key, make, usable=usable)
    if not got.hit:
        if got.not_stored:
            console.warn(f"{got.not_stored}; this job's outputs are not saved for reuse")
        return ran["result"]
    saved = ran["saved"]  # the served entry was the last one looked at
    assert saved is not None  # usable() said so of the entry served
    if not _restore(got.served, saved[1], layout, fp):
        return run_job()  # its engine or a file left between the look and the restore
    return _reused(saved[0], key)


def _reused(result: JobResult, key: str) -> JobResult:
    ran = {k: result.get(k) for k in ("host", "node", "store_event")}
    return {**result, "store_event": REUSED, "reused": {"job_key": key, **ran}}
