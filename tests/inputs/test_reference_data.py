"""model.reference_data and the inputs of a model given as a file: the user's arrays
become the reference the gate and the benchmark judge by; without them, inputs are
random (masks 0/1, model.input_ranges) and every output says so; bad folders and
ranges are one line each. Real export (ONNX Runtime), ModelOpt, TensorRT-RTX."""

import json
import subprocess
import sys

import numpy as np
import pytest

from pipeline.bench.bench_shapes import choose_feeds
from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.inputs import reference_file
from pipeline.zoo import transformer_encoder
from tests.conftest import FAST_BENCH, REPO, compose


@pytest.fixture(scope="module")
def outlier_onnx(tmp_path_factory):
    """The outlier transformer as a user's ONNX file (no factory behind it)."""
    layout = Layout(tmp_path_factory.mktemp("outlier_file"))
    stages.export(compose("model=outlier_transformer"), layout)
    return layout.export_dir / "model.onnx"


def tokens(n: int, seed: int, seq: int = 32) -> dict:
    return transformer_encoder.sample_inputs(
        {"batch": n, "seq": seq}, np.random.default_rng([seed, 77])
    )


def file_model(onnx_path, *overrides):
    return compose(
        "model=onnx_file",
        f"model.onnx_path={onnx_path}",
        "model.task=embedding",
        "model.sample_dims={batch: 8, seq: 32}",
        *overrides,
    )


def pairs_inputs(export_dir):
    pairs = reference_file.read(export_dir / "reference.npz")
    return {k: np.concatenate([p[0][k] for p in pairs]) for k in pairs[0][0]}


def test_file_model_gate_runs_on_the_users_arrays(outlier_onnx, tmp_path):
    user = tokens(24, seed=5)
    fileio.write_npz(tmp_path / "ref" / "sentences.npz", user)
    cfg = file_model(
        outlier_onnx,
        f"model.reference_data={tmp_path / 'ref'}",
        "precision=int8",
        "precision.fallback=auto",
        "calibration=transformer_samples",
        f"calibration.path={REPO / 'data/calibration/transformer'}",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = Layout(tmp_path / "run")
    summary = stages.export(cfg, layout)
    assert summary["reference"]["source"] == "folder" and summary["reference"]["samples"] == 24
    assert summary["reference"]["random"] is False
    got = pairs_inputs(layout.export_dir)
    for name in user:
        np.testing.assert_array_equal(got[name], user[name])
    calibrated = stages.calibrate(cfg, layout)
    assert calibrated["reference"]["source"] == "folder"
    assert calibrated["reference_overlap"] == {
        "reference_samples": 24,
        "overlapping_samples": 0,
        "held_out_samples": 24,
    }
    metrics = fileio.read_json(layout.metrics_dir / "accuracy.json")
    assert metrics["reference_inputs"]["sha256"] == summary["reference"]["sha256"]
    # the search judged part of them; the verdict is on the rest (gate/verdict.py)
    split = metrics["holdout"]
    assert split["search_samples"] + split["verdict_samples"] == 24
    assert metrics["accuracy"]["embedding"]["rows"] == split["verdict_samples"]
    assert metrics["gate_passed"] and set(metrics["search"]) == {"embedding"}


def test_benchmark_feeds_are_the_users_rows():
    pairs = [(tokens(3, seed=1), {}), (tokens(2, seed=2), {})]
    rows = {k: np.concatenate([p[0][k] for p in pairs]) for k in pairs[0][0]}
    point = type(
        "P", (), {"key": "b8", "shapes": {"input_ids": [8, 32], "attention_mask": [8, 32]}}
    )
    short = type(
        "P", (), {"key": "s16", "shapes": {"input_ids": [2, 16], "attention_mask": [2, 16]}}
    )
    long = type(
        "P", (), {"key": "s64", "shapes": {"input_ids": [2, 64], "attention_mask": [2, 64]}}
    )
    feeds, used = choose_feeds([point, short, long], pairs, True, lambda shapes: "sampled")
    assert used == ["b8", "s16"] and feeds["s64"] == "sampled"
    np.testing.assert_array_equal(feeds["b8"]["input_ids"], rows["input_ids"][np.arange(8) % 5])
    np.testing.assert_array_equal(feeds["s16"]["attention_mask"], rows["attention_mask"][:2, :16])


def test_benchmark_stage_runs_on_reference_data(tmp_path):
    """tiny_mlp as a file with a reference folder, through a real build and benchmark."""
    user = {"features": np.random.default_rng(3).uniform(-2, 2, (12, 16)).astype(np.float32)}
    fileio.write_npz(tmp_path / "ref" / "x.npz", user)
    cfg = compose(
        "model=onnx_file",
        f"model.reference_data={tmp_path / 'ref'}",
        "benchmark.backends=[onnxruntime]",
        f"build.store_dir={tmp_path / 'store'}",
        *FAST_BENCH,
    )
    layout = Layout(tmp_path / "run")
    for name in ("fingerprint", "export", "calibrate", "build"):
        stages.BY_NAME[name](cfg, layout)
    np.testing.assert_array_equal(pairs_inputs(layout.export_dir)["features"], user["features"])
    metrics = stages.benchmark(cfg, layout)
    assert metrics["inputs"]["reference"]["source"] == "folder"
    assert metrics["headline"] in metrics["inputs"]["from_reference_data"]
    assert metrics["results"]["onnxruntime"]["accuracy"]["scores"]["max_abs_error"] == 0.0
    assert "Reference inputs: folder" in (layout.metrics_dir / "benchmark.md").read_text()


def test_random_inputs_are_flagged_masks_are_0_1_and_ranges_apply(outlier_onnx, tmp_path):
    cfg = file_model(outlier_onnx, "model.input_ranges={input_ids: [5, 9]}")
    layout = Layout(tmp_path / "run")
    summary = stages.export(cfg, layout)
    assert summary["reference"]["random"] is True and "RANDOM" in summary["reference"]["note"]
    assert summary["reference"]["ranges"] == {"input_ids": [5, 9], "attention_mask": [0, 2]}
    got = pairs_inputs(layout.export_dir)
    assert set(np.unique(got["attention_mask"])) <= {0, 1}
    assert got["input_ids"].min() >= 5 and got["input_ids"].max() < 9
    stages.calibrate(cfg, layout)
    metrics = fileio.read_json(layout.metrics_dir / "accuracy.json")
    assert metrics["reference_inputs"]["random"] is True


def bad_folders(root):
    good = tokens(4, seed=9)
    cases = {
        "missing": (root / "nope", "reference data not found"),
        "empty": (root / "empty", "has no .npz or .npy files"),
        "unknown": (root / "unknown", "unknown input 'labels'"),
        "dtype": (root / "dtype", "input 'input_ids' is int32, the model wants int64"),
        "rank": (root / "rank", "input 'attention_mask' has shape \\[4\\], the model wants rank 2"),
        "nan": (root / "nan", None),
        "pickled": (root / "pickled", "unreadable"),
    }
    (root / "empty").mkdir()
    fileio.write_npz(root / "unknown" / "a.npz", {**good, "labels": np.zeros(4, np.int64)})
    fileio.write_npz(
        root / "dtype" / "a.npz", {**good, "input_ids": good["input_ids"].astype(np.int32)}
    )
    fileio.write_npz(root / "rank" / "a.npz", {**good, "attention_mask": np.ones(4, np.int64)})
    (root / "pickled").mkdir()
    np.save(
        root / "pickled" / "input_ids.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True
    )
    return cases


@pytest.mark.parametrize("case", ["missing", "empty", "unknown", "dtype", "rank", "pickled"])
def test_bad_reference_folders_are_one_line_and_leave_nothing(outlier_onnx, tmp_path, case):
    folder, needle = bad_folders(tmp_path)[case]
    with pytest.raises(PipelineError, match=needle) as failed:
        stages.export(
            file_model(outlier_onnx, f"model.reference_data={folder}"), Layout(tmp_path / "run")
        )
    assert "\n" not in str(failed.value)
    assert not (tmp_path / "run" / "artifacts" / "export").exists()


def test_nan_or_inf_reference_data_is_refused(tmp_path):
    x = np.zeros((4, 16), np.float32)
    x[1, 2] = np.inf
    fileio.write_npz(tmp_path / "ref" / "x.npz", {"features": x})
    with pytest.raises(PipelineError, match="input 'features' holds NaN or inf"):
        stages.export(
            compose("model=onnx_file", f"model.reference_data={tmp_path / 'ref'}"),
            Layout(tmp_path / "run"),
        )


def test_input_ranges_for_an_unknown_input(outlier_onnx, tmp_path):
    with pytest.raises(
        PipelineError, match="model.input_ranges names 'token_ids'.*input_ids, attention_mask"
    ):
        stages.export(
            file_model(outlier_onnx, "model.input_ranges={token_ids: [0, 9]}"),
            Layout(tmp_path / "run"),
        )
    with pytest.raises(
        PipelineError, match=r"model.input_ranges.input_ids=\[9, 9\]; needs \[low, high\]"
    ):
        file_model(outlier_onnx, "model.input_ranges={input_ids: [9, 9]}")


def test_overlap_with_calibration_is_counted_and_total_overlap_refused(outlier_onnx, tmp_path):
    user = tokens(16, seed=11)
    fileio.write_npz(tmp_path / "ref" / "r.npz", user)
    fileio.write_npz(
        tmp_path / "half" / "c.npz",
        {k: np.concatenate([v[:8], tokens(8, seed=12)[k]]) for k, v in user.items()},
    )
    common = (
        f"model.reference_data={tmp_path / 'ref'}",
        "precision=int8",
        "calibration=transformer_samples",
        "calibration.batch_size=8",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = Layout(tmp_path / "run")
    stages.export(file_model(outlier_onnx, *common), layout)
    cfg = file_model(
        outlier_onnx,
        *common,
        f"calibration.path={tmp_path / 'half'}",
        "precision.gate.min_cosine=0.9",
        "precision.gate.max_abs_error=1.0",
    )
    summary = stages.calibrate(cfg, layout)
    assert summary["reference_overlap"] == {
        "reference_samples": 16,
        "overlapping_samples": 8,
        "held_out_samples": 8,
    }
    # the embedding table's type is chosen on part of the 8; the verdict judges the rest
    assert summary["holdout"]["search_samples"] + summary["holdout"]["verdict_samples"] == 8
    assert summary["accuracy"]["embedding"]["rows"] == summary["holdout"]["verdict_samples"]
    with pytest.raises(PipelineError, match="every reference sample is also a calibration sample"):
        stages.calibrate(
            file_model(outlier_onnx, *common, f"calibration.path={tmp_path / 'ref'}"), layout
        )


def test_sample_dims_take_new_names_without_plus_through_the_cli(tmp_path):
    out = tmp_path / "params.yaml"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "params",
            "model=cnn",
            "model.sample_dims={batch: 4, seq: 32}",
            "model.input_ranges={images: [0, 1]}",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    from pipeline.core import config

    cfg = config.load(out)
    assert dict(cfg.model.sample_dims) == {"batch": 4, "seq": 32}
    assert dict(cfg.model.input_ranges) == {"images": [0, 1]}


def test_bad_reference_data_through_the_stage_cli(in_tmp_repo_copy):
    """One line on stderr, exit 1, no artifacts/export."""
    repo = in_tmp_repo_copy
    fileio.write_npz(
        repo / "data/reference/wrong" / "a.npz", {"features": np.zeros((4, 16), np.float64)}
    )
    for path, needle in (
        ("data/reference/nope", "reference data not found"),
        ("data/reference/wrong", "input 'features' is float64, the model wants float32"),
    ):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pipeline",
                "params",
                "model=onnx_file",
                f"model.reference_data={path}",
            ],
            cwd=repo,
            check=True,
            capture_output=True,
        )
        r = subprocess.run(
            [sys.executable, "-m", "stages.export"], cwd=repo, capture_output=True, text=True
        )
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 1 and len(lines) == 1 and needle in lines[0], r.stderr
        assert not (repo / "artifacts/export").exists()


def test_fallback_needs_strong_typing():
    with pytest.raises(PipelineError, match="precision.fallback=auto needs precision.mode=strong"):
        compose("precision=int8", "precision.mode=weak", "precision.fallback=auto")


def test_a_reference_folder_outside_the_repository_is_a_dvc_dependency(in_tmp_repo_copy, tmp_path):
    """DVC hashes the folder model.reference_data names wherever it lives (dvc.yaml templates
    model.reference_source from it), so changing one of its arrays makes export stale; a
    reference_data outside a reference_source set by hand is refused with one line."""
    repo, outside = in_tmp_repo_copy, tmp_path / "outside_refs"
    fileio.write_npz(outside / "rows.npz", {"features": np.ones((8, 16), np.float32)})
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "params",
            "model=onnx_file",
            f"model.reference_data={outside}",
        ],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    status = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "export", "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert status.returncode == 0, status.stderr
    deps = {
        p for change in json.loads(status.stdout)["export"] for p in change.get("changed deps", {})
    }
    assert str(outside) in deps, status.stdout

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "params",
            "model=onnx_file",
            f"model.reference_data={outside}",
            "model.reference_source=data/reference",
        ],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    r = subprocess.run(
        [sys.executable, "-m", "stages.export"], cwd=repo, capture_output=True, text=True
    )
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert (
        r.returncode == 1 and len(lines) == 1 and "not under model.reference_source" in lines[0]
    ), r.stderr
    assert not (repo / "artifacts/export").exists()
