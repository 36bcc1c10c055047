"""One Hydra job: every stage for one composed config, in the job's own folder
(`python -m pipeline.cli.run` checks the command line, then hands it to `main` here).

Each job calls the same functions as the DVC stages (pipeline/flow/stages.py), logs a line per
stage to `<job>/run.log` (Hydra's job logging) and leaves artifacts/, metrics/ and
result.json in its folder, which conf/config.yaml names after the job's overrides. The
sweep summary (pipeline/sweeps/sweep_table.py) reads result.json when the multirun ends."""

from __future__ import annotations

import logging
import os
import socket
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from pipeline.core import config, fileio, models
from pipeline.core.errors import PipelineError
from pipeline.core.exits import one_line
from pipeline.core.layout import Layout
from pipeline.core.numbers import MIB
from pipeline.core.stage_names import JOB_STAGES
from pipeline.flow import stages
from pipeline.flow.stages import StageRecord, StageRecords
from pipeline.sweeps import job_cache
from pipeline.sweeps.job_files import ERROR_FILE, RESULT_FILE, JobResult

if TYPE_CHECKING:
    from hydra.conf import HydraConf

    from pipeline.core.config import PipelineConfig

log = logging.getLogger("pipeline.cli.run")
TRACEBACK_FILE = "traceback.txt"  # a job's unexpected exception, for whoever debugs it
# The repository the command was started in (jobs run there: hydra.job.chdir is false):
# its conf/ and dvc.yaml, a checkout of trt-pipeline or a repository set up by `init`.
REPO = Path.cwd()


def job_result(results: StageRecords, cfg: PipelineConfig) -> JobResult:
    bench = results["benchmark"]["results"]
    manifest = results["build"]
    from pipeline.flow import calibrate_stage

    accuracy_gate = calibrate_stage.accuracy_metrics(cfg, results["calibrate"])  # accuracy.json
    return {
        "model": results["benchmark"]["model"],
        "precision": results["benchmark"]["precision"],
        "profile": cfg.profile.name,
        "engine_sha256": manifest["engine"]["sha256"],
        "engine_bytes": manifest["engine"]["bytes"],
        "build_seconds": manifest.get("build_seconds"),
        "store_event": manifest.get("store_event"),
        "cache_key": manifest.get("cache_key"),
        "backend": manifest["backend"],
        "fingerprint": manifest["fingerprint"]["id"],
        "gpu": (manifest["fingerprint"].get("gpu") or {}).get("name", "no GPU"),
        "accuracy": results["calibrate"]["accuracy"],
        "accuracy_gate": accuracy_gate.get("gate", {}),
        "accuracy_gate_passed": accuracy_gate.get("gate_passed"),
        "accuracy_on_random_inputs": bool(
            (accuracy_gate.get("reference_inputs") or {}).get("random")
        ),
        "benchmark": {
            k: {
                m: v.get(m)
                for m in ("status", "median_ms", "p99_ms", "throughput_per_s", "reason")
                if m in v
            }
            for k, v in bench.items()
        },
        "host": socket.gethostname(),
        "node": os.environ.get("TRT_PIPELINE_NODE"),
    }


def job_failed(mode: RunMode | None, out: Path, why: str) -> None:
    """error.txt (the sweep summary's row, the launcher's verdict) and one line on stderr;
    a single run then exits 1, a sweep goes on with its other jobs and exits 1 at the end
    (pipeline.sweeps.sweep_table.SummaryCallback)."""
    log.error(why)
    fileio.write_text(out / ERROR_FILE, why + "\n")
    if mode != RunMode.MULTIRUN:
        print(f"error: {why}", file=sys.stderr)
        raise SystemExit(1)
    print(f"error: job {out.name}: {why}", file=sys.stderr)


def stage_line(name: str, result: Mapping[str, Any]) -> str:
    """One line per finished stage for run.log."""
    if name == "fingerprint":
        gpu = (result.get("gpu") or {}).get("name", "no GPU")
        return f"fingerprint: {result['id']} ({gpu}, {result.get('trt_flavour')} {result.get('trt_version')})"
    if name == "calibrate":
        passed = all(r["passed"] for r in result.get("gate", []))
        return f"calibrate: accuracy gate {'passed' if passed else 'failed'}"
    if name == "build":
        return (
            f"build: engine store {result.get('store_event')}, {result['engine']['bytes'] / MIB:.2f} MiB, "
            f"built in {result.get('build_seconds')} s, key {str(result.get('cache_key'))[:16]}"
        )
    if name == "benchmark":
        parts = [
            f"{k} {v['median_ms']:.3f} ms" if v.get("status") == "ok" else f"{k} {v.get('status')}"
            for k, v in result["results"].items()
        ]
        return "benchmark: median " + ", ".join(parts)
    return f"{name}: done"


# An absolute path: Hydra resolves a relative one against the module (pkg://), not the file.
@hydra.main(config_path=str(REPO / "conf"), config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    for stale in (
        RESULT_FILE,
        ERROR_FILE,
        TRACEBACK_FILE,
    ):  # a rerun into the same folder: no old verdict survives
        (out / stale).unlink(missing_ok=True)
    try:
        run_job(cfg, hc, out)
    except PipelineError as e:
        job_failed(hc.mode, out, one_line(e))
    except Exception as e:
        # Anything else (TensorRT's RuntimeError, a factory's own error, a bug) ends this
        # job only: raised out of a launcher it ended the whole multirun, with no summary.
        # Its traceback goes to a file of its own, not to the sweep's console.
        fileio.write_text(out / TRACEBACK_FILE, traceback.format_exc())
        why = f"{type(e).__name__}: {one_line(e)} (traceback in {TRACEBACK_FILE})"
        job_failed(hc.mode, out, why)


def run_job(cfg: DictConfig, hc: HydraConf, out: Path) -> None:
    validated = config.validate(models.swept(cfg))
    layout = Layout(out)

    def logged(n: str, r: StageRecord) -> None:
        log.info(stage_line(n, r))

    fp = stages.fingerprint(validated, layout)
    logged("fingerprint", fp)
    result = job_cache.reuse_or_run(
        REPO,
        validated,
        layout,
        fp,
        lambda: job_result(
            stages.run_all(validated, layout, logged, {"fingerprint": fp}, JOB_STAGES), validated
        ),
    )
    if "reused" in result:
        log.info(
            f"{job_cache.REUSED}: every input matches a finished job (key {result['reused']['job_key'][:16]}, "
            f"ran on {result['reused']['host']}); its outputs are restored and nothing ran again "
            f"(sweep.reuse=false measures again)"
        )
    result.update(
        {
            "overrides": list(hc.overrides.task),
            "host": socket.gethostname(),
            "node": os.environ.get("TRT_PIPELINE_NODE"),
        }
    )
    fileio.write_json(out / RESULT_FILE, result)
    log.info(f"{validated.model.name} {validated.precision.name} done")
    print(f"{out}: {validated.model.name} {validated.precision.name} done")
