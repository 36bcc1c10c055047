"""The summary of a sweep: one row per job, as Markdown, CSV and a Pareto picture.

Written when a Hydra multirun ends (`SummaryCallback`, named in conf/config.yaml's
`hydra.callbacks`) and by `python -m pipeline sweep-report DIR` over a multirun folder
(every `result.json` below it; a job folder with `.hydra/` but no result is a failed
job), or `--dvc` over `dvc exp show --json` (each experiment's metrics/summary.json and
params; hit or built from a queued experiment's log, no fingerprint).

    sweep_summary.md / .csv    model, precision, profile, fingerprint, engine MiB, build s,
                               each accuracy gate metric, median / p99 latency, throughput,
                               gate status, store hit or built
    sweep_pareto.svg / .png    accuracy against latency, the Pareto front joined, marker
                               area by engine size
    sweep_pareto_size.svg / .png   accuracy against engine size, the front joined
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hydra.experimental.callback import Callback

from pipeline.core import fileio, imports, tables
from pipeline.core.errors import PipelineError
from pipeline.core.numbers import MIB, fmt
from pipeline.records import summary_file
from pipeline.sweeps.job_files import ERROR_FILE, RESULT_FILE, JobResult
from pipeline.sweeps.pareto import pareto, plot

if TYPE_CHECKING:
    from omegaconf import DictConfig


log = logging.getLogger("pipeline.sweeps.sweep_table")

LATENCY_BACKENDS = ("tensorrt", "onnxruntime_calibrated", "onnxruntime")
# pipeline/flow/stages.py's line for the build's engine store event, e.g. "engine store hit: 9c3e33529ac19ecd (".
STORE_LINE = re.compile(r"^engine store (.+?): [0-9a-f]{16} \(", re.MULTILINE)
FIXED = (
    "job",
    "model",
    "precision",
    "profile",
    "fingerprint",
    "engine_mib",
    "build_s",
    "latency_backend",
    "median_ms",
    "p99_ms",
    "throughput_per_s",
    "gates",
    "store",
)


def _store_word(event: str | None) -> str | None:
    if not event:
        return None
    if event == "job reused":  # pipeline/sweeps/job_cache.py: restored, nothing ran
        return "reused"
    return "built" if "built" in event and "meanwhile" not in event else "hit"


# Open shape: a sweep-table row, FIXED's columns and an acc:<metric> column per gate metric.
def row_from_result(job: str, r: JobResult) -> dict[str, Any]:
    """A summary row from a job's result.json (pipeline/sweeps/job.py)."""
    bench = r.get("benchmark", {})
    backend = next((b for b in LATENCY_BACKENDS if bench.get(b, {}).get("status") == "ok"), None)
    measured = bench.get(backend, {}) if backend else {}
    row = {
        "job": job,
        "model": r.get("model"),
        "precision": r.get("precision"),
        "profile": r.get("profile"),
        "fingerprint": r.get("fingerprint"),
        "engine_mib": round(r["engine_bytes"] / MIB, 3)
        if r.get("engine_bytes") is not None
        else None,
        "build_s": r.get("build_seconds"),
        "latency_backend": backend,
        "median_ms": measured.get("median_ms"),
        "p99_ms": measured.get("p99_ms"),
        "throughput_per_s": measured.get("throughput_per_s"),
        "gates": _gate_word(r.get("accuracy_gate_passed"), r.get("accuracy_on_random_inputs")),
        "store": _store_word(r.get("store_event")),
    }
    row.update(_accuracy_columns(r.get("accuracy_gate", {})))
    return row


def _gate_word(passed: bool | None, on_random: bool | None = False) -> str | None:
    if passed is None:
        return None
    return ("passed" if passed else "FAILED") + (" on RANDOM inputs" if on_random else "")


# Open shape: acc:<metric> columns, named by the accuracy gate's metrics and outputs.
def _accuracy_columns(gate: dict[str, Any]) -> dict[str, Any]:
    """`acc:<metric>` per gate metric, the worst over outputs (names them when several)."""
    cols: dict[str, Any] = {}
    many = len(gate) > 1
    for output, metrics in sorted(gate.items()):
        for metric, rec in sorted(metrics.items()):
            cols[f"acc:{output}.{metric}" if many else f"acc:{metric}"] = rec.get("value")
    return cols


# Open shape: a sweep-table row (job, gates), one type with the open rows it is listed among.
def failed_row(job: str, why: str = "job failed (no result.json)") -> dict[str, Any]:
    return {"job": job, "gates": why}


def collect(folder: str | Path) -> list[dict[str, Any]]:
    """Rows for every job under a multirun folder, sorted by job name."""
    root = Path(folder)
    if not root.is_dir():
        raise PipelineError(f"sweep-report: {root} is not a folder")
    rows = []
    for hydra_dir in sorted(root.rglob(".hydra")):
        job_dir = hydra_dir.parent
        if job_dir == root and (root / "multirun.yaml").exists():
            continue
        name = str(job_dir.relative_to(root)) if job_dir != root else job_dir.name
        result, error = job_dir / RESULT_FILE, job_dir / ERROR_FILE
        got = fileio.read_json(result, "job result") if result.exists() else None
        if isinstance(got, dict):
            rows.append(row_from_result(name, cast(JobResult, got)))
        elif result.exists():
            rows.append(failed_row(name, f"{RESULT_FILE} is not a job result"))
        elif error.is_file():
            rows.append(
                failed_row(name, f"job failed: {error.read_text(errors='replace').strip()[:300]}")
            )
        else:
            rows.append(failed_row(name))
    if not rows:
        raise PipelineError(
            f"sweep-report: no jobs under {root} (no job folder with .hydra/ or result.json)"
        )
    return rows


def collect_dvc(repo: str | Path = ".") -> list[dict[str, Any]]:
    """Rows for the workspace and every experiment `dvc exp show --json` lists."""
    try:
        proc = subprocess.run(
            ["dvc", "exp", "show", "--json"], cwd=repo, capture_output=True, text=True
        )
    except FileNotFoundError:
        raise PipelineError("sweep-report --dvc: dvc is not on PATH") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise PipelineError(
            f"sweep-report --dvc: dvc exp show failed: {lines[-1] if lines else proc.returncode}"
        )
    rows = [
        row
        for rev, executor in _dvc_revs(json.loads(proc.stdout or "[]"))
        if (row := _dvc_row(rev, executor)) is not None
    ]
    if not rows:
        raise PipelineError(
            f"sweep-report --dvc: no experiments with metrics in {Path(repo).resolve()}"
        )
    return rows


def _dvc_revs(entries: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Flatten dvc exp show --json (3.x): each experiment with its executor (a queued
    run's state and log), then its baseline commit; the workspace comes first."""
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for entry in entries:
        for exp in entry.get("experiments") or []:
            out.extend((rev, exp.get("executor") or {}) for rev in exp.get("revs") or [])
        out.append((entry, {}))
    return out


# Open shape: a sweep-table row, FIXED's columns and an acc:<metric> column per summary metric.
def _dvc_row(rev: dict[str, Any], executor: dict[str, Any]) -> dict[str, Any] | None:
    """A row from metrics/summary.json (pipeline/report/benchmark/headline.py: flat, the worst accuracy
    over outputs, each backend's headline latency) and params.yaml; a failed experiment is
    a row saying so; one with no metrics yet (queued, or a workspace not run) is none."""
    name = rev.get("name") or str(rev.get("rev", "?"))[:7]
    data = rev.get("data") or {}
    metrics = {Path(k).name: (v or {}).get("data") for k, v in (data.get("metrics") or {}).items()}
    found = metrics.get(summary_file.NAME)
    if not found:
        failed = executor.get("state") == "failed"
        return failed_row(name, f"experiment failed (dvc queue logs {name})") if failed else None
    try:
        summary = summary_file.check(found, f"experiment {name}'s {summary_file.NAME}")
    except PipelineError as e:
        return failed_row(name, str(e))
    params = ((data.get("params") or {}).get("params.yaml") or {}).get("data") or {}
    backend = next((b for b in LATENCY_BACKENDS if f"{b}_median_ms" in summary), None)
    passes = [summary.get("accuracy_gate_pass"), summary.get("build_gates_pass")]
    row = {
        "job": name,
        "model": (params.get("model") or {}).get("name"),
        "precision": (params.get("precision") or {}).get("name"),
        "profile": (params.get("profile") or {}).get("name"),
        "fingerprint": None,
        "engine_mib": summary.get("engine_mib"),
        "build_s": summary.get("build_s"),
        "latency_backend": backend,
        **{f: summary.get(f"{backend}_{f}") for f in ("median_ms", "p99_ms", "throughput_per_s")},
        "gates": _gate_word(None if None in passes else all(passes)),
        "store": _store_word(_queue_store_event(executor)),
    }
    row.update(
        {f"acc:{k[len('worst_') :]}": v for k, v in summary.items() if k.startswith("worst_")}
    )
    return row


def _queue_store_event(executor: dict[str, Any]) -> str | None:
    """What the build stage did with the engine store (the line pipeline/flow/stages.py prints),
    from a queued experiment's log; None without one (a workspace run, a removed queue
    entry) or where the build stage did not run. DVC keeps no such record in the
    experiment: it is this run's doing, not a property of the engine."""
    log = (executor.get("local") or {}).get("log")
    try:
        text = Path(log).read_text(errors="replace") if log else ""
    except OSError:
        return None
    found = STORE_LINE.findall(text)
    return found[-1] if found else None


# Precisions whose engine is meant to be smaller than the float engines of the same graph.
QUANTIZED = ("int8", "fp8", "int4_awq", "int4_rtn", "auto")
FLOATS = ("fp16", "fp32")


def against_floats(rows: list[dict[str, Any]]) -> list[str]:
    """Each row's engine size against the fp16 and fp32 engines of the same model, profile
    and machine in the sweep (`engine_vs_fp16`, `engine_vs_fp32`, set on the rows); and a
    line for each quantized engine larger than one of them (never a silent outcome: on a
    small model a TensorRT-RTX plan's code per engine layer outweighs the weights that
    quantization saves, and Q/DQ adds layers)."""

    def group(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r.get("model"), r.get("profile"), r.get("fingerprint"))

    floats = {
        (group(r), r["precision"]): r["engine_mib"]
        for r in rows
        if r.get("precision") in FLOATS and r.get("engine_mib")
    }
    lines = []
    for r in rows:
        if not r.get("engine_mib"):
            continue
        for kind in FLOATS:
            ref = floats.get((group(r), kind))
            if ref and r.get("precision") != kind:
                r[f"engine_vs_{kind}"] = round(r["engine_mib"] / ref, 3)
        larger = [k for k in FLOATS if r.get(f"engine_vs_{k}", 0) > 1]
        if r.get("precision") in QUANTIZED and larger:
            lines.append(
                f"- `{r['job']}` ({r['precision']}): its engine, {r['engine_mib']:.3g} MiB, is "
                + " and ".join(f"{r[f'engine_vs_{k}']:.2f}x the {k} engine's" for k in larger)
                + " of the same model and profile"
            )
    return lines


def columns(rows: list[dict[str, Any]]) -> list[str]:
    acc = sorted({k for r in rows for k in r if k.startswith("acc:")})
    vs = [f"engine_vs_{k}" for k in FLOATS if any(f"engine_vs_{k}" in r for r in rows)]
    return [*list(FIXED[:6]), *vs, "build_s", *acc, *list(FIXED[7:])]


def to_csv(rows: list[dict[str, Any]]) -> str:
    against_floats(rows)
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=columns(rows), extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def to_markdown(rows: list[dict[str, Any]], title: str) -> str:
    larger = against_floats(rows)
    cols = columns(rows)
    body = tables.markdown(cols, [[fmt(r.get(c)) for c in cols] for r in rows])
    fronts = {x: pareto(rows, x) for x in ("median_ms", "engine_mib")}
    note = (
        "Latency is the engine's where a GPU ran it, else the graph TensorRT builds on ONNX Runtime "
        "(`latency_backend` says which). Pareto front (accuracy against median latency): "
        + (", ".join(f"`{r['job']}`" for r in fronts["median_ms"]) or "none measured")
        + "; (accuracy against engine size): "
        + (", ".join(f"`{r['job']}`" for r in fronts["engine_mib"]) or "none measured")
        + "."
    )
    sizes = (
        "\n\nQuantized engines larger than a float engine of the same graph:\n\n"
        + "\n".join(larger)
        if larger
        else ""
    )
    return f"# Sweep summary: {title}\n\n{len(rows)} job(s).\n\n{body}\n\n{note}{sizes}\n"


def write(rows: list[dict[str, Any]], out_dir: str | Path, title: str) -> list[Path]:
    out = Path(out_dir)
    paths = [
        fileio.write_text(out / "sweep_summary.md", to_markdown(rows, title)),
        fileio.write_text(out / "sweep_summary.csv", to_csv(rows)),
    ]
    return paths + plot(rows, out, title)


def report(folder: str | Path) -> list[Path]:
    return write(collect(folder), folder, Path(folder).name)


# The summary's matplotlib import (not on the callback: launchers pickle it with each job).
_IMPORTS: list[threading.Thread] = []


class SummaryCallback(Callback):
    """Writes the summary into the sweep folder when a Hydra multirun ends."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # matplotlib's ~0.5 s import, most of the summary's time, done while the jobs run.
        _IMPORTS.append(imports.prefetch("matplotlib.figure"))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        while _IMPORTS:  # a sweep shorter than the import: never two threads importing it
            _IMPORTS.pop().join()
        folder = Path(config.hydra.sweep.dir)
        try:
            rows = collect(folder)
            paths = write(rows, folder, folder.name)
        except PipelineError as e:
            log.warning(f"no sweep summary: {e}")
            return
        log.info(f"sweep summary: {paths[0]}")
        failed = [r for r in rows if str(r.get("gates", "")).startswith("job failed")]
        if failed:  # each failed job has said why; the sweep as a whole did not succeed
            print(
                f"error: {len(failed)} of {len(rows)} jobs failed (see {paths[0]})", file=sys.stderr
            )
            raise SystemExit(1)
