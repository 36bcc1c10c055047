"""The build stage checks the disk before it writes an engine: a real TensorRT-RTX build
of the CNN, then a filesystem that says it has 1 MiB free (shutil.disk_usage, not
TensorRT, is what stands in): one line, nothing stored, no engine folder left."""

from __future__ import annotations

import shutil
from collections import namedtuple

import pytest

from pipeline.core.errors import PipelineError
from pipeline.engine import store
from pipeline.flow import stages
from tests.conftest import FAST_BENCH, _pipeline_through, compose

MIB = 1 << 20


def test_a_full_disk_is_one_line_before_the_engine_is_written(tmp_path, monkeypatch):
    cfg = compose(
        "model=cnn", "precision=fp32", f"build.store_dir={tmp_path / 'store'}", *FAST_BENCH
    )
    layout = _pipeline_through(tmp_path, cfg, "calibrate")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(100 * MIB, 99 * MIB, 1 * MIB))
    with pytest.raises(PipelineError) as e:
        stages.build(cfg, layout, progress=False)
    text = str(e.value)
    assert "not enough disk for the engine" in text and "\n" not in text
    assert "1,048,576 bytes (1.0 MiB) free" in text
    assert str(tmp_path / "store") in text
    fp = stages.read_fingerprint(layout)["id"]
    assert not layout.engine_dir(fp).exists()
    assert store.EngineStore(tmp_path / "store").keys() == []

    monkeypatch.undo()  # room again: the same build now goes through
    manifest = stages.build(cfg, layout, progress=False)
    assert manifest["store_event"] == "miss, built" and manifest["peak_rss_mib"] > 30

    # An engine DVC restored into artifacts/ is copied into an empty store: checked too.
    other = compose(
        "model=cnn", "precision=fp32", f"build.store_dir={tmp_path / 'other'}", *FAST_BENCH
    )
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(100 * MIB, 99 * MIB, 1 * MIB))
    with pytest.raises(PipelineError, match="not enough disk for the pulled engine"):
        stages.build(other, layout, progress=False)
    assert store.EngineStore(tmp_path / "other").keys() == []
