"""Multirun job folders: a `/` in a value does not nest folders, and a name over the
255-byte file-name limit becomes a shorter one, readable, unique and the same every time,
with every launcher; the full overrides stay in the job's .hydra/overrides.yaml."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hydra_plugins.trt_pipeline import jobdir

REPO = Path(__file__).resolve().parents[2]
FAST = [
    "benchmark.warmup_s=0.02",
    "benchmark.min_duration_s=0.05",
    "benchmark.min_iterations=5",
    "inspect.html=false",
]
SHORTENED = re.compile(r"~[0-9a-f]{12}$")


def test_a_name_that_fits_is_hydras_with_slash_and_percent_encoded():
    assert jobdir.name("model=cnn,precision=fp16") == "model=cnn,precision=fp16"
    assert jobdir.name("") == ""
    assert jobdir.name("model.onnx_path=/a/../b.onnx") == "model.onnx_path=%2Fa%2F..%2Fb.onnx"
    assert jobdir.name("x=a%2Fb") != jobdir.name("x=a/b")


def test_a_long_name_keeps_every_key_and_each_file_name_and_ends_in_a_hash():
    deep = "/" + "/".join(["d" * 60] * 5)
    names = [
        jobdir.name(f"build.backend=tensorrt_rtx,model.onnx_path={deep}/{f},precision=fp16")
        for f in ("a.onnx", "b.onnx")
    ]
    for n, f in zip(names, ("a.onnx", "b.onnx")):
        assert len(n.encode()) <= 255 and SHORTENED.search(n), n
        assert (
            n.startswith("build.backend=tensorrt_rtx,model.onnx_path=%2Fddd")
            and f"%2F{f},precision=fp16~" in n
        )
    assert names[0] != names[1]
    assert jobdir.name(f"model.onnx_path={deep}/a.onnx") == jobdir.name(
        f"model.onnx_path={deep}/a.onnx"
    )


def test_many_keys_or_wide_characters_are_cut_to_the_limit():
    many = ",".join(f"key{i}.sub_key_{i}=value_{i}" for i in range(40))
    n = jobdir.name(many)
    assert (
        len(n.encode()) == 255
        and n.startswith("key0.sub_key_0=value_0,key1")
        and SHORTENED.search(n)
    )
    wide = jobdir.name("x=" + "é" * 300)
    assert len(wide.encode()) <= 255 and SHORTENED.search(wide)
    wide.encode().decode()  # no split character


@pytest.mark.parametrize("launcher", ["basic", "joblib", "trt_ray"])
def test_every_launcher_resolves_the_job_folder_name(launcher):
    deep = "/" + "/".join(["d" * 60] * 6) + "/m.onnx"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli.run",
            "--cfg",
            "hydra",
            "--resolve",
            "--package",
            "hydra.sweep.subdir",
            f"hydra/launcher={launcher}",
            "model=onnx_file",
            f"model.onnx_path={deep}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    name = r.stdout.strip().splitlines()[-1]
    assert name == jobdir.name(f"model.onnx_path={deep},model=onnx_file") and SHORTENED.search(
        name
    ), name


@pytest.mark.e2e
@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_jobs_with_long_paths_get_flat_short_folders_and_keep_their_overrides(tmp_path, launcher):
    deep = tmp_path.joinpath(*["long_folder_name_" * 4] * 3)
    deep.mkdir(parents=True)
    paths = [deep / f"{n}.onnx" for n in ("a", "b")]
    for p in paths:
        shutil.copy(REPO / "pipeline/zoo/onnx/tiny_mlp.onnx", p)
    sweep_dir = tmp_path / "sweep"
    parallel = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli.run",
            "--multirun",
            f"hydra/launcher={launcher}",
            *parallel,
            f"hydra.sweep.dir={sweep_dir}",
            "build.backend=tensorrt_rtx",
            "model=onnx_file",
            f"model.onnx_path={paths[0]},{paths[1]}",
            *FAST,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "TRT_PIPELINE_STORE": str(tmp_path / "store")},
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir())
    assert len(jobs) == 2 and [j for j in jobs if (j / ".hydra").is_dir()] == jobs, (
        jobs
    )  # flat: no nesting
    for job, path in zip(jobs, paths):
        assert (
            len(job.name.encode()) <= 255
            and SHORTENED.search(job.name)
            and f"%2F{path.name}," in job.name
        )
        assert f"model.onnx_path={path}" in yaml.safe_load(
            (job / ".hydra" / "overrides.yaml").read_text()
        )
        assert (
            f"model.onnx_path={path}" in json.loads((job / "result.json").read_text())["overrides"]
        )
    rows = list(csv.DictReader((sweep_dir / "sweep_summary.csv").open()))
    assert sorted(row["job"] for row in rows) == [j.name for j in jobs], rows
