"""One writer at a time per stage output (`artifacts/build/<fingerprint>`, ...).

DVC holds a lock of its own around `dvc repro`, but stages started by hand, by a script
or from two terminals in one checkout have none: they replaced and removed each other's
folders (a stage's staged_dir rename met another's, and a failing one removed the folder
another was reading). So a stage holds its output's lock from before it reads what it
may replace until the output is whole, and a waiter says on what and whom it waits,
then runs as usual (a build then finds its engine in the store). Waiting has a limit,
TRT_PIPELINE_OUTPUT_LOCK_TIMEOUT seconds (an hour by default: a large engine can take
that long to build), after which the stage stops with one line; flock dies with its
holder, so a killed writer leaves nobody waiting."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from pipeline.core import locking
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout

TIMEOUT_ENV = "TRT_PIPELINE_OUTPUT_LOCK_TIMEOUT"
DEFAULT_TIMEOUT_S = 3600.0


def lock_file(layout: Layout, output: Path) -> Path:
    """Under the layout's .cache/locks, outside every output: a lock file left by a killed
    process must never be hashed by DVC or saved with a sweep job's files."""
    rel = Path(os.path.relpath(output, layout.root))
    return layout.root / ".cache" / "locks" / f"{'+'.join(rel.parts)}.lock"


def timeout_s() -> float:
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise PipelineError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds (0 or more)")
    return value


@contextlib.contextmanager
def writing(
    layout: Layout,
    output: Path,
    what: str | None = None,
    remove_on_failure: bool = True,
    stage: str | None = None,
) -> Iterator[None]:
    """Hold `output`'s lock inside. A failure inside removes the folder `output` (unless
    `remove_on_failure` is False), still under the lock: the previous run's output must
    not look current for the params that just failed (artifacts/build persists across
    runs, and a later stage run by hand would consume it). With `stage`, a failure also
    removes what the stages after it wrote (remove_later_outputs). A waiter that gives up
    removes nothing: the folder is the other process's."""
    path = lock_file(layout, output)
    fd = _acquire(path, what or str(output))
    try:
        try:
            yield
        except BaseException:
            if remove_on_failure and output.exists():
                shutil.rmtree(output, ignore_errors=True)
            if stage is not None:
                remove_later_outputs(layout, stage)
            raise
    finally:
        locking.release(path, fd)


def remove_later_outputs(layout: Layout, stage: str) -> list[Path]:
    """Remove the outputs dvc.yaml declares for the stages after `stage` (persistent ones
    kept): after a failed run, a report, a summary or a benchmark of the previous run would
    look like this run's. `dvc status` and `trt-pipeline status` then name those stages as
    stale. Without a dvc.yaml at the layout's root (a sweep job's folder) nothing is removed."""
    from pipeline.core import dvc_yaml

    if not (layout.root / "dvc.yaml").is_file():
        return []
    stages = list(dvc_yaml.stages(layout.root).items())
    names = [name for name, _ in stages]
    if stage not in names:
        return []
    removed = []
    for _, spec in stages[names.index(stage) + 1 :]:
        for entry in [*spec.get("outs", []), *spec.get("metrics", []), *spec.get("plots", [])]:
            rel, opts = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
            if "${" in rel or (opts or {}).get("persist"):
                continue
            target = layout.root / rel
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            elif target.exists():
                target.unlink()
            else:
                continue
            removed.append(target)
    return removed


def _acquire(path: Path, what: str) -> int:
    limit = timeout_s()
    try:
        return locking.acquire(path, timeout=0)
    except locking.LockTimeout as e:
        print(f"waiting for another process writing {what} (pid {e.holder})", file=sys.stderr)
    try:
        return locking.acquire(path, timeout=limit)
    except locking.LockTimeout as e:
        raise PipelineError(
            f"another process is writing {what} (pid {e.holder}); gave up after {limit:g} s "
            f"(${TIMEOUT_ENV} sets how long to wait)"
        ) from None
