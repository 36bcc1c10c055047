"""Calibration sets are sized before they are made or read: random samples by the model's
inputs times calibration.num_samples, a folder by the unpacked size of its files."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from pipeline.core import memory
from pipeline.core.errors import PipelineError
from pipeline.inputs import calibration_data
from tests.conftest import REPO, _pipeline_through, compose

CNN_SAMPLE = 3 * 32 * 32 * 4


@pytest.fixture(scope="module")
def cnn_graph(tmp_path_factory):
    cfg = compose("model=cnn")
    layout = _pipeline_through(tmp_path_factory.mktemp("cnn_export"), cfg, "export")
    return layout.export_dir / "model.onnx"


def test_a_trillion_random_samples_is_one_line(cnn_graph):
    cfg = compose("model=cnn", "calibration=random", "calibration.num_samples=1000000000000")
    with pytest.raises(PipelineError) as e:
        calibration_data.load(cfg.calibration, cfg.model, cnn_graph)
    text = str(e.value)
    assert text.startswith("calibration.num_samples=1000000000000:") and "\n" not in text
    assert f"needs {10**12 * CNN_SAMPLE:,} bytes" in text


def test_a_folder_larger_than_memory_is_refused_before_it_is_read(cnn_graph, monkeypatch):
    cfg = compose("model=cnn", "calibration=cnn_samples")
    folder = REPO / "data/calibration/cnn"
    with np.load(folder / "samples.npz") as z:
        unpacked = sum(z[k].nbytes for k in z.files)
    # the real check, on a machine that says it has one byte less than the file unpacks to
    have = unpacked - 1
    monkeypatch.setattr(memory, "available_memory", lambda: (have, "a small machine"))
    with pytest.raises(PipelineError) as e:
        calibration_data.load(cfg.calibration, cfg.model, cnn_graph)
    text = str(e.value)
    assert text.startswith("calibration.path=") and "data/calibration/cnn" in text
    with zipfile.ZipFile(folder / "samples.npz") as z:  # each array with its .npy header
        need = sum(i.file_size for i in z.infolist())
    assert f"needs {need:,} bytes" in text and f"has {have:,} bytes" in text
    monkeypatch.setattr(memory, "available_memory", lambda: (unpacked + 4096, "enough"))
    assert calibration_data.load(cfg.calibration, cfg.model, cnn_graph).info["num_samples"] > 0
