import numpy as np
import onnx
import pytest

from pipeline.core import hashing
from pipeline.core.errors import PipelineError
from pipeline.export import export
from pipeline.graph import onnx_model, onnx_runtime
from pipeline.inputs import reference_file
from tests.conftest import REPO, compose


def test_cnn_export_has_dynamic_batch_and_reference(built_cnn):
    _, layout = built_cnn
    model = onnx_model.load(layout.export_dir / "model.onnx")
    [spec] = onnx_model.inputs(model)
    assert spec.name == "images" and spec.dims == ("batch", 3, 32, 32)
    assert len(model.graph.value_info) >= len(model.graph.node) - 1  # shapes were inferred and kept
    pairs = reference_file.read(layout.export_dir / "reference.npz")
    assert len(pairs) == 4
    inputs, outputs = pairs[0]
    assert outputs["logits"].shape == (8, 10)
    # the reference really is ONNX Runtime's output for those inputs
    [again] = onnx_runtime.run_batches(layout.export_dir / "model.onnx", [inputs])
    np.testing.assert_allclose(again["logits"], outputs["logits"], rtol=1e-5, atol=1e-6)


def test_transformer_export_takes_int64_ids_and_mask(built_transformer):
    _, layout = built_transformer
    specs = {
        s.name: s for s in onnx_model.inputs(onnx_model.load(layout.export_dir / "model.onnx"))
    }
    assert specs["input_ids"].dtype == "int64" and specs["input_ids"].dims == ("batch", "seq")
    assert specs["attention_mask"].dims == ("batch", "seq")


def test_export_is_deterministic(tmp_path, built_cnn):
    cfg, layout = built_cnn
    export.export_model(cfg.model, cfg.profile, tmp_path / "again")
    assert hashing.sha256_file(tmp_path / "again" / "model.onnx") == hashing.sha256_file(
        layout.export_dir / "model.onnx"
    )
    assert (tmp_path / "again" / "reference.npz").read_bytes() == (
        layout.export_dir / "reference.npz"
    ).read_bytes()


def test_onnx_file_model(tmp_path):
    cfg = compose("model=onnx_file", f"model.onnx_path={REPO / 'pipeline/zoo/onnx/tiny_mlp.onnx'}")
    summary = export.export_model(cfg.model, cfg.profile, tmp_path / "export")
    assert summary["inputs"][0]["dims"] == ["batch", 16]


def test_corrupt_onnx_is_one_clear_error_and_no_output(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 50)
    cfg = compose("model=onnx_file", f"model.onnx_path={bad}")
    with pytest.raises(PipelineError, match="bad.onnx"):
        export.export_model(cfg.model, cfg.profile, tmp_path / "export")
    assert not (tmp_path / "export").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.onnx"]


def test_missing_model_file(tmp_path):
    cfg = compose("model=onnx_file", f"model.onnx_path={tmp_path / 'nope.onnx'}")
    with pytest.raises(PipelineError, match="not found"):
        export.export_model(cfg.model, cfg.profile, tmp_path / "export")


def test_sha256_covers_external_data(tmp_path):
    from onnx.external_data_helper import convert_model_to_external_data

    model = onnx.load(REPO / "pipeline/zoo/onnx/tiny_mlp.onnx")
    convert_model_to_external_data(model, location="weights.bin", size_threshold=0)
    onnx.save(model, tmp_path / "m.onnx")
    before = onnx_model.sha256(tmp_path / "m.onnx")
    data = bytearray((tmp_path / "weights.bin").read_bytes())
    data[10] ^= 0xFF
    (tmp_path / "weights.bin").write_bytes(bytes(data))
    assert onnx_model.sha256(tmp_path / "m.onnx") != before
