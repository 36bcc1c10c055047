"""Hydra multirun with the joblib launcher, job folders named by overrides, run.log,
and the sweep summary (callback and `python -m pipeline sweep-report`); every sweep form
Hydra's basic sweeper takes passes the override check and runs, a bad one is one line."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import overrides
from pipeline.core.errors import PipelineError
from pipeline.sweeps import sweep_table
from tests.helpers import SWEEP_FAST as FAST

REPO = Path(__file__).resolve().parents[2]


def multirun(
    sweep_dir: Path, *overrides: str, store: Path, launcher: str = "joblib"
) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRT_PIPELINE_STORE": str(store)}
    parallel = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli.run",
            "--multirun",
            f"hydra/launcher={launcher}",
            *parallel,
            f"hydra.sweep.dir={sweep_dir}",
            "build.backend=tensorrt_rtx",
            *overrides,
            *FAST,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.e2e
def test_joblib_sweep_names_folders_logs_and_summarises_and_a_rerun_builds_nothing(tmp_path):
    store = tmp_path / "store"
    first = multirun(tmp_path / "a", "model=cnn", "precision=fp32,fp16", store=store)
    assert first.returncode == 0, first.stderr[-3000:]
    jobs = sorted(p.name for p in (tmp_path / "a").iterdir() if p.is_dir())
    assert jobs == [
        "build.backend=tensorrt_rtx,model=cnn,precision=fp16",
        "build.backend=tensorrt_rtx,model=cnn,precision=fp32",
    ], jobs
    assert "is launching 2 jobs" in first.stdout  # the first job must run: all go to the workers
    share = str(
        max(len(os.sched_getaffinity(0)) // 2, 1)
    )  # loky's limit for 2 jobs (pipeline/sweeps/warm_workers.py)
    for job in jobs:
        log = (tmp_path / "a" / job / "run.log").read_text()
        assert "build: engine store miss, built" in log and "benchmark: median" in log, log
        assert (
            json.loads((tmp_path / "a" / job / "result.json").read_text())["store_event"]
            == "miss, built"
        )
        conditions = json.loads((tmp_path / "a" / job / "metrics" / "benchmark.json").read_text())[
            "conditions"
        ]
        assert (conditions["omp_num_threads"], str(conditions["torch_threads"])) == (
            share,
            share,
        ), conditions
        assert (str(conditions["intra_op_threads"]), conditions["threads_from"]) == (
            share,
            "OMP_NUM_THREADS",
        )
    rows = list(csv.DictReader((tmp_path / "a" / "sweep_summary.csv").open()))
    assert {r["precision"] for r in rows} == {"fp32", "fp16"} and {r["store"] for r in rows} == {
        "built"
    }
    assert all(
        r["gates"] == "passed" and float(r["median_ms"]) > 0 and r["acc:cosine"] for r in rows
    )
    assert (tmp_path / "a" / "sweep_pareto.svg").read_text().lstrip().startswith("<?xml")
    assert (tmp_path / "a" / "sweep_pareto.png").stat().st_size > 1000
    assert (tmp_path / "a" / "sweep_pareto_size.svg").read_text().lstrip().startswith("<?xml")

    # The two finished jobs are restored in the sweep's own process before any worker
    # starts (hydra_plugins/trt_pipeline/reuse_first.py); only the new one is launched.
    again = multirun(tmp_path / "b", "model=cnn", "precision=fp32,fp16,tf32", store=store)
    assert again.returncode == 0, again.stderr[-3000:]
    launched = [line for line in again.stdout.splitlines() if "\t#" in line]
    assert (
        "is launching 1 jobs" in again.stdout
        and len(launched) == 1
        and "precision=tf32" in launched[0]
    ), launched
    rows = {
        r["precision"]: r for r in csv.DictReader((tmp_path / "b" / "sweep_summary.csv").open())
    }
    assert {p: r["store"] for p, r in rows.items()} == {
        "fp32": "reused",
        "fp16": "reused",
        "tf32": "built",
    }
    for job in jobs:
        a, b = tmp_path / "a" / job, tmp_path / "b" / job
        assert "job reused: every input matches a finished job" in (b / "run.log").read_text()
        assert "build:" not in (b / "run.log").read_text()
        for rel in (
            "artifacts/export/model.onnx",
            "metrics/benchmark.json",
            "artifacts/inspect/report.md",
        ):
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
        [engine_a] = a.glob("artifacts/build/*/engine.plan")
        assert engine_a.read_bytes() == (b / engine_a.relative_to(a)).read_bytes()

    measured = multirun(
        tmp_path / "c", "model=cnn", "precision=fp32,fp16", "sweep.reuse=false", store=store
    )
    assert measured.returncode == 0, measured.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "c" / "sweep_summary.csv").open()))
    assert {r["store"] for r in rows} == {"hit"}, rows  # measured again, the engines from the store
    assert "is launching 2 jobs" in measured.stdout

    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "sweep-report",
            str(tmp_path / "b"),
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 0, cli.stderr
    assert (tmp_path / "out" / "sweep_summary.csv").read_text() == (
        tmp_path / "b" / "sweep_summary.csv"
    ).read_text()


def test_sweep_report_on_a_folder_without_jobs_is_one_line(tmp_path):
    cli = subprocess.run(
        [sys.executable, "-m", "pipeline", "sweep-report", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 1 and cli.stderr.count("\n") == 1 and "no jobs" in cli.stderr, (
        cli.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_a_job_folder_without_result_is_a_failed_row(tmp_path):
    (tmp_path / "precision=int8" / ".hydra").mkdir(parents=True)
    rows = sweep_table.collect(tmp_path)
    assert rows == [{"job": "precision=int8", "gates": "job failed (no result.json)"}]
    with pytest.raises(PipelineError, match="not a folder"):
        sweep_table.collect(tmp_path / "missing")


def _dvc_rev(name, summary=None, precision="fp16", error=None):
    """One revision as DVC 3.67's `dvc exp show --json` gives it (trimmed)."""
    metrics = {
        "metrics/summary.json": {"data": summary}
        if summary
        else {"error": {"type": "FileNotFoundError", "msg": "No such file"}}
    }
    return {
        "rev": "0123456789abcdef",
        "name": name,
        "error": error,
        "experiments": None,
        "data": {
            "rev": "0123456789abcdef",
            "timestamp": "2026-11-22T11:10:33",
            "metrics": metrics,
            "params": {
                "params.yaml": {
                    "data": {
                        "model": {"name": "cnn"},
                        "precision": {"name": precision},
                        "profile": {"name": "dynamic"},
                    }
                }
            },
        },
    }


def test_dvc_rows_come_from_summary_json_params_and_the_queue_log(tmp_path, monkeypatch):
    summary = {
        "accuracy_gate_pass": 1,
        "build_gates_pass": 0,
        "build_s": 0.1,
        "engine_mib": 0.5,
        "onnxruntime_median_ms": 0.4,
        "onnxruntime_p99_ms": 3.3,
        "onnxruntime_throughput_per_s": 9.0,
        "torch_median_ms": 0.9,
        "worst_cosine": 0.99,
        "worst_max_abs_error": 0.01,
    }
    log = tmp_path / "task.out"
    log.write_text("build stage\nengine store hit: 9c3e33529ac19ecd (cnn fp16, nogpu-rtx)\n")
    exps = [
        {
            "name": "again",
            "executor": {"state": "success", "local": {"log": str(log)}},
            "revs": [_dvc_rev("again", summary)],
        },
        {
            "name": "broken",
            "executor": {"state": "failed", "local": {"log": str(tmp_path / "gone.out")}},
            "revs": [_dvc_rev("broken", error={"msg": "Experiment run failed", "type": ""})],
        },
        {
            "name": "old",
            "executor": {"state": "success", "local": None},
            "revs": [_dvc_rev("old", {**summary, "engine_mib": "0.5 MiB"})],
        },
        {
            "name": "waiting",
            "executor": {"state": "queued", "local": None},
            "revs": [_dvc_rev("waiting")],
        },
    ]
    shown = [_dvc_rev(None), {**_dvc_rev("master", summary, precision="fp32"), "experiments": exps}]
    shown[0]["rev"] = "workspace"
    monkeypatch.setattr(
        sweep_table.subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=json.dumps(shown), stderr=""),
    )
    rows = {r["job"]: r for r in sweep_table.collect_dvc(tmp_path)}
    assert sorted(rows) == ["again", "broken", "master", "old"], rows
    assert rows["again"] == {
        "job": "again",
        "model": "cnn",
        "precision": "fp16",
        "profile": "dynamic",
        "fingerprint": None,
        "engine_mib": 0.5,
        "build_s": 0.1,
        "latency_backend": "onnxruntime",
        "median_ms": 0.4,
        "p99_ms": 3.3,
        "throughput_per_s": 9.0,
        "gates": "FAILED",
        "store": "hit",
        "acc:cosine": 0.99,
        "acc:max_abs_error": 0.01,
    }
    assert rows["master"]["precision"] == "fp32" and rows["master"]["store"] is None
    assert rows["broken"]["gates"] == "experiment failed (dvc queue logs broken)"
    assert rows["old"]["gates"] == (
        "experiment old's summary.json has no valid 'engine_mib' (made by another version, or "
        "edited); rerun the benchmark stage"
    )


def _row(job, median, cosine, mib=1.0):
    return {
        "job": job,
        "median_ms": median,
        "acc:cosine": cosine,
        "engine_mib": mib,
        "precision": job,
        "latency_backend": "onnxruntime",
    }


def test_pareto_keeps_only_jobs_nothing_beats_on_both_axes():
    rows = [
        _row("fp32", 3.0, 1.0),
        _row("fp16", 2.0, 0.999),
        _row("int8", 1.0, 0.99),
        _row("bad", 2.5, 0.98),
    ]
    assert [r["job"] for r in sweep_table.pareto(rows)] == ["int8", "fp16", "fp32"]
    rows = [{**r, "acc:max_abs_error": 1 - r.pop("acc:cosine")} for r in rows]
    assert [r["job"] for r in sweep_table.pareto(rows)] == ["int8", "fp16", "fp32"]


@pytest.mark.parametrize("launcher", ["joblib", "submitit_slurm", "trt_ray"])
def test_every_sweep_launcher_composes_with_our_config(launcher):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli.run",
            "--cfg",
            "hydra",
            "--package",
            "hydra.launcher",
            f"hydra/launcher={launcher}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and "_target_" in r.stdout, r.stderr


@pytest.mark.parametrize(
    "given,first_precision",
    [
        (["precision=glob(*)"], "auto"),
        (["precision=glob([fp1*,fp3*])"], "fp16"),
        (["precision=choice(fp16,fp32)", "model=cnn,transformer"], "fp16"),
        (["benchmark.intra_op_threads=range(1,3)"], "fp32"),
        (["++benchmark.intra_op_threads=1,2", "~inspect.html"], "fp32"),
        (
            ["model=transformer", "++model.sample_dims.seq=16,32", "+model.input_ranges.x=[0,9]"],
            "fp32",
        ),
        (
            [
                "hydra/launcher=joblib",
                "hydra.launcher.n_jobs=2",
                "hydra.sweep.dir=/tmp/x",
                "precision=int8,fp16",
            ],
            "int8",
        ),
        (["hydra/launcher=trt_ray", "hydra.launcher.num_cpus=2", "hydra.job.chdir=false"], "fp32"),
    ],
)
def test_sweep_forms_hydra_takes_pass_the_check(given, first_precision):
    assert overrides.check(given, REPO / "conf", multirun=True).precision.name == first_precision


@pytest.mark.parametrize(
    "given,needle",
    [
        (["precision=fp16,fp99"], "no option 'fp99' in config group 'precision'"),
        (["precision=choice(fp16,fp99)"], "no option 'fp99'"),
        (["precision=glob(zz*)"], "matches no option of config group 'precision'"),
        (["benchmark.min_iterations=glob(*)"], "'benchmark.min_iterations' is not one"),
        (["bogus.key=1,2"], "unknown config key 'bogus'"),
        (["+bogus.key=1,2"], "unknown config key 'bogus'"),
        (["~bogus"], "unknown config key 'bogus'"),
        (["benchmark.intra_op_threads=1,many"], "the job with benchmark.intra_op_threads=many"),
        (["benchmark.intra_op_threads=range(2,0)"], "sweeps over no values"),
        (["benchmark.min_iterations=interval(1,5)"], "interval() needs a sampling sweeper"),
        (
            ["hydra/launcher=jobilb"],
            "no option 'jobilb' in config group 'hydra/launcher' (nearest: joblib",
        ),
        (["hydra.launcher.n_jobs=2"], "pick another first, e.g. hydra/launcher=joblib"),
        (["hydra.sweep.dri=x"], "nearest: hydra.sweep.dir"),
        (["precision=null"], "Config group override must be a string"),
        (["benchmark.warmup_s=0.1,0.2"], "jobs would share one folder"),
        (["precision=fp16,fp32,fp16"], "lists fp16 more than once"),
    ],
)
def test_a_bad_sweep_is_refused(given, needle):
    with pytest.raises(PipelineError) as e:
        overrides.check(given, REPO / "conf", multirun=True)
    assert needle in str(e.value) and "\n" not in str(e.value), e.value


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--multirun", "precision=fp16,fp99"], "'fp99'"),
        (["--multirun", "precision=glob(zz*)"], "matches no option"),
        (["--multirun", "bogus.key=1,2"], "unknown config key 'bogus'"),
        (
            ["--multirun", "hydra/launcher=joblib", "benchmark.intra_op_threads=choice(1,x)"],
            "intra_op_threads=x",
        ),
        (["precision=fp16,fp32"], "is a sweep: add --multirun"),
        (["--multirun", "--cfg", "job", "precision=fp16"], "only one of --cfg, --multirun"),
        (["hydra.mode=MULTIRUN", "precision=fp16,fp99"], "'fp99'"),
    ],
)
def test_a_bad_sweep_on_the_command_line_is_one_line_and_writes_nothing(tmp_path, args, needle):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli.run",
            f"hydra.sweep.dir={tmp_path / 's'}",
            f"hydra.run.dir={tmp_path / 'r'}",
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert (
        r.returncode == 1
        and len(lines) == 1
        and lines[0].startswith("error: ")
        and needle in lines[0]
    ), r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
def test_glob_range_and_delete_sweep_runs_one_job_per_value(tmp_path):
    r = multirun(
        tmp_path / "s",
        "model=cnn",
        "precision=glob(fp3*)",
        "benchmark.intra_op_threads=range(1,3)",
        "~inspect.graph_max_nodes",
        "inspect.html=false",
        store=tmp_path / "store",
        launcher="basic",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    common = "build.backend=tensorrt_rtx,inspect.html=False,model=cnn,precision=fp32,~inspect.graph_max_nodes=null"
    jobs = sorted(p.name for p in (tmp_path / "s").iterdir() if p.is_dir())
    assert jobs == [f"benchmark.intra_op_threads={n},{common}" for n in (1, 2)], jobs
    rows = list(csv.DictReader((tmp_path / "s" / "sweep_summary.csv").open()))
    assert sorted(r["job"] for r in rows) == jobs and all(r["gates"] == "passed" for r in rows), (
        rows
    )


@pytest.mark.e2e
def test_a_failed_job_does_not_stop_the_sweep_and_the_summary_says_why(tmp_path):
    """fp32's engine (0.64 MiB) misses a 0.6 MiB gate, fp16's (0.53) passes: both jobs run,
    each failure is one line naming its job, the summary lists the reason, exit 1."""
    env = {**os.environ, "TRT_PIPELINE_STORE": str(tmp_path / "store")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli.run",
            "--multirun",
            f"hydra.sweep.dir={tmp_path / 's'}",
            "model=cnn",
            "build.backend=tensorrt_rtx",
            "precision=fp32,fp16",
            "build.gates.max_engine_mib=0.6",
            *FAST,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert len(errors) == 2 and "precision=fp32: build gate max_engine_mib failed" in errors[0], (
        errors
    )
    assert errors[1].startswith("error: 1 of 2 jobs failed"), errors
    rows = {
        row["job"].rsplit("=", 1)[-1]: row
        for row in csv.DictReader((tmp_path / "s" / "sweep_summary.csv").open())
    }
    assert rows["fp32"]["gates"].startswith("job failed: build gate max_engine_mib failed"), rows
    assert rows["fp16"]["gates"] == "passed" and float(rows["fp16"]["median_ms"]) > 0, rows
    [fp32] = (tmp_path / "s").glob("*precision=fp32")
    assert not (fp32 / "result.json").exists() and (fp32 / "error.txt").read_text().startswith(
        "build gate"
    )


def test_the_size_front_keeps_the_jobs_no_smaller_engine_beats_on_accuracy(tmp_path):
    from pipeline.sweeps import pareto

    rows = [
        {"job": "fp32", "engine_mib": 4.0, "median_ms": 1.0, "acc:cosine": 1.0},
        {"job": "fp16", "engine_mib": 2.0, "median_ms": 0.7, "acc:cosine": 0.9999},
        {"job": "int8", "engine_mib": 1.2, "median_ms": 0.5, "acc:cosine": 0.99},
        {"job": "auto", "engine_mib": 1.0, "median_ms": 0.6, "acc:cosine": 0.995},
        {"job": "worse", "engine_mib": 2.5, "median_ms": 0.9, "acc:cosine": 0.99},
    ]
    assert [r["job"] for r in pareto.pareto(rows, "engine_mib")] == ["auto", "fp16", "fp32"]
    assert [r["job"] for r in pareto.pareto(rows)] == ["int8", "auto", "fp16", "fp32"]
    for r in rows:
        r.update(precision=r["job"], latency_backend="onnxruntime")
    names = {p.name for p in pareto.plot(rows, tmp_path, "t")}
    assert names == {f"sweep_pareto{s}.{e}" for s in ("", "_size") for e in ("svg", "png")}


def test_a_quantized_engine_larger_than_a_float_one_is_said_in_the_summary():
    """On a 0.6 MB PP-OCR classifier TensorRT-RTX's int8 plan was 2.7x the fp32 one: the
    summary gives every engine's size against the fp16 and fp32 engines of the same model,
    profile and machine, and a line for each quantized one that is larger."""

    def row(job, precision, mib, model="cls"):
        return {
            "job": job,
            "model": model,
            "precision": precision,
            "profile": "default",
            "fingerprint": "nogpu",
            "engine_mib": mib,
        }

    rows = [
        row("0", "fp32", 3.41),
        row("1", "fp16", 3.31),
        row("2", "int8", 9.21),
        row("3", "int4_awq", 2.0),
        row("4", "int8", 1.0, model="other"),
    ]
    page = sweep_table.to_markdown(rows, "t")
    assert rows[2]["engine_vs_fp16"] == round(9.21 / 3.31, 3)
    assert rows[3]["engine_vs_fp32"] == round(2.0 / 3.41, 3) and "engine_vs_fp16" not in rows[4]
    lines = [x for x in page.splitlines() if x.startswith("- `")]
    assert lines == [
        "- `2` (int8): its engine, 9.21 MiB, is 2.78x the fp16 engine's and 2.70x the fp32 "
        "engine's of the same model and profile"
    ]
    assert "engine_vs_fp16" in sweep_table.to_csv(rows).splitlines()[0]
