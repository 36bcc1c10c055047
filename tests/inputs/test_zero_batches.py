"""Reference data that comes to zero batches stops the export in one line, leaving no
artifacts/export behind, instead of the calibrate stage failing on an empty file."""

import numpy as np
import pytest

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import stages
from tests.conftest import REPO, compose

TINY = REPO / "pipeline/zoo/onnx/tiny_mlp.onnx"


def _export_fails(tmp_path, *overrides) -> str:
    layout = Layout(tmp_path / "run")
    cfg = compose("model=onnx_file", f"model.onnx_path={TINY}", *overrides)
    with pytest.raises(PipelineError) as e:
        stages.export(cfg, layout)
    assert not layout.export_dir.exists()
    return str(e.value)


def test_no_reference_batches_asked_for(tmp_path):
    message = _export_fails(tmp_path, "model.num_reference_batches=0")
    assert message.startswith("model.num_reference_batches=0 gives no reference batches")


def test_a_folder_of_empty_arrays(tmp_path):
    data = tmp_path / "reference"
    data.mkdir()
    np.savez(data / "x.npz", features=np.zeros((0, 16), np.float32))
    message = _export_fails(
        tmp_path, f"model.reference_data={data}", f"model.reference_source={data}"
    )
    assert "zero sample counts" in message and "\n" not in message
