"""Calibration sets from real files, factories and random draws, checked against the
real exported models' inputs (no ModelOpt needed here)."""

import numpy as np
import pytest

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.export import export
from pipeline.inputs import calibration_data, reference_file
from tests.conftest import REPO, compose


def load(model, onnx_path, *overrides):
    cfg = compose(f"model={model}", *overrides)
    return calibration_data.load(cfg.calibration, cfg.model, onnx_path)


@pytest.fixture(scope="module")
def cnn_onnx(built_cnn):
    return built_cnn[1].export_dir / "model.onnx"


@pytest.fixture(scope="module")
def transformer_onnx(built_transformer):
    return built_transformer[1].export_dir / "model.onnx"


def test_shipped_sets_are_small_and_fit_their_models(cnn_onnx, transformer_onnx):
    for model, onnx_path in (("cnn", cnn_onnx), ("transformer", transformer_onnx)):
        path = REPO / "data/calibration" / model / "samples.npz"
        assert path.stat().st_size < 512 * 1024
        s = load(model, onnx_path, f"calibration={model}_samples")
        assert s.info["source"] == "directory" and s.info["random"] is False
        assert {len(next(iter(b.values()))) for b in s.batches} == {8}
        assert s.info["sha256"] == calibration_data.data_sha256(s.batches)


def test_directory_takes_the_first_num_samples(cnn_onnx):
    s = load(
        "cnn",
        cnn_onnx,
        "calibration=cnn_samples",
        "calibration.num_samples=12",
        "calibration.batch_size=5",
    )
    assert [b["images"].shape[0] for b in s.batches] == [5, 5, 2]
    whole = fileio.read_npz(REPO / "data/calibration/cnn/samples.npz")["images"]
    assert np.array_equal(np.concatenate([b["images"] for b in s.batches]), whole[:12])


def test_reference_batches_are_not_calibration_samples(built_transformer, transformer_onnx):
    pairs = reference_file.read(built_transformer[1].export_dir / "reference.npz")
    for option in ("transformer_samples", "factory", "none"):
        s = load("transformer", transformer_onnx, f"calibration={option}")
        assert not any(s.uses(feeds) for feeds, _ in pairs)
        assert s.uses(s.batches[0])


def test_npy_files_named_after_inputs(tmp_path, cnn_onnx):
    images = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "images.npy", images)
    s = load("cnn", cnn_onnx, "calibration=cnn_samples", f"calibration.path={tmp_path}")
    assert s.info["num_samples"] == 4


def test_a_reference_folder_with_labels_serves_as_calibration_data(tmp_path, cnn_onnx):
    """`label:<name>` arrays (a task metric's labels) ride along in a reference folder; the
    same folder calibrates, its labels left out of the batches and of the data's hash."""
    images = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "a.npz", images=images, **{"label:text": np.array(list("abcd"))})
    s = load("cnn", cnn_onnx, "calibration=cnn_samples", f"calibration.path={tmp_path}")
    np.savez(tmp_path / "a.npz", images=images)
    plain = load("cnn", cnn_onnx, "calibration=cnn_samples", f"calibration.path={tmp_path}")
    assert s.info["num_samples"] == 4 and all(set(b) == {"images"} for b in s.batches)
    assert s.info["sha256"] == plain.info["sha256"]


@pytest.mark.parametrize(
    "arrays,needle",
    [
        ({"pixels": np.zeros((4, 3, 32, 32), np.float32)}, "another model"),
        (
            {"images": np.zeros((4, 3, 32, 32), np.float32), "labels": np.zeros(4, np.int64)},
            "unknown input 'labels'",
        ),
        ({"images": np.zeros((4, 3, 32, 32), np.float64)}, "is float64, the model wants float32"),
        ({"images": np.zeros((4, 3, 16, 16), np.float32)}, "does not fit"),
        ({"images": np.zeros((4, 32, 32), np.float32)}, "rank 4"),
    ],
)
def test_bad_directory_content_is_one_clear_error(tmp_path, cnn_onnx, arrays, needle):
    fileio.write_npz(tmp_path / "set.npz", arrays)
    with pytest.raises(PipelineError, match=needle):
        load("cnn", cnn_onnx, "calibration=cnn_samples", f"calibration.path={tmp_path}")


def test_set_for_another_model(cnn_onnx):
    with pytest.raises(PipelineError, match="another model.*input_ids"):
        load("cnn", cnn_onnx, "calibration=transformer_samples")


def test_empty_and_missing_directories(tmp_path, cnn_onnx):
    with pytest.raises(PipelineError, match="no .npz or .npy files"):
        load("cnn", cnn_onnx, "calibration=cnn_samples", f"calibration.path={tmp_path}")
    with pytest.raises(PipelineError, match="not found"):
        load("cnn", cnn_onnx, "calibration=cnn_samples", f"calibration.path={tmp_path / 'nope'}")


def test_fewer_samples_than_asked(cnn_onnx):
    with pytest.raises(PipelineError, match="num_samples=100 but .* holds only 32"):
        load("cnn", cnn_onnx, "calibration=cnn_samples", "calibration.num_samples=100")


def test_pickled_arrays_are_refused_not_loaded(tmp_path, cnn_onnx):
    np.save(tmp_path / "images.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(PipelineError, match="unreadable"):
        load("cnn", cnn_onnx, "calibration=cnn_samples", f"calibration.path={tmp_path}")


def test_symbolic_dims_must_agree_across_inputs(tmp_path, transformer_onnx):
    fileio.write_npz(
        tmp_path / "set.npz",
        {"input_ids": np.zeros((4, 32), np.int64), "attention_mask": np.ones((4, 16), np.int64)},
    )
    with pytest.raises(PipelineError, match="attention_mask.*does not fit"):
        load(
            "transformer",
            transformer_onnx,
            "calibration=transformer_samples",
            f"calibration.path={tmp_path}",
        )


def test_factory_batches_and_last_partial_batch(cnn_onnx):
    s = load(
        "cnn",
        cnn_onnx,
        "calibration=factory",
        "calibration.num_samples=20",
        "calibration.batch_size=8",
    )
    assert [b["images"].shape[0] for b in s.batches] == [8, 8, 4]
    assert s.info["factory"] == "pipeline.zoo.cnn_classifier" and s.info["seed"] == 0


def test_factory_of_another_model(cnn_onnx):
    with pytest.raises(PipelineError, match="another model"):
        load(
            "cnn",
            cnn_onnx,
            "calibration=factory",
            "calibration.factory=pipeline.zoo.transformer_encoder",
        )


def test_random_is_explicit_and_flagged(cnn_onnx):
    s = load("cnn", cnn_onnx, "calibration=random")
    assert s.info["random"] is True and "random" in s.info["note"]


def test_none_falls_back_to_the_model_factory_and_says_so(cnn_onnx):
    s = load("cnn", cnn_onnx)
    assert s.info["source"] == "factory" and "calibration=none" in s.info["fallback"]
    assert s.info["num_samples"] == calibration_data.FALLBACK_SAMPLES and s.info["random"] is False


def test_none_without_a_factory_names_the_ways_out(tmp_path):
    onnx_path = REPO / "pipeline/zoo/onnx/tiny_mlp.onnx"
    with pytest.raises(PipelineError, match="calibration.source=random"):
        load("onnx_file", onnx_path)
    cfg = compose("model=onnx_file")
    export.export_model(cfg.model, cfg.profile, tmp_path / "export")
    exported = tmp_path / "export" / "model.onnx"
    assert load("onnx_file", exported, "calibration=random").info["random"] is True
