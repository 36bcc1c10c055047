"""Fixtures of the precision tests: exports made once and copied into each test's own
folder, and the int8/fp8 graphs of one calibration (real ModelOpt, real ONNX Runtime)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.core import fileio
from pipeline.core.layout import Layout
from pipeline.export import export
from pipeline.flow import steps
from tests.conftest import compose


def fresh(exported: Layout, tmp_path: Path) -> Layout:
    """A layout of its own holding a copy of `exported`'s export stage."""
    layout = Layout(tmp_path / "run")
    shutil.copytree(exported.export_dir, layout.export_dir)
    return layout


def reference_pairs(layout: Layout) -> list[tuple[dict, dict]]:
    return export.split_reference(fileio.read_npz(layout.export_dir / "reference.npz"))


def quantized(layout: Layout, tmp_path: Path, *overrides: str):
    """quantize.quantize on the export, as the calibrate stage calls it: the result holds
    the calibration summary and every graph the fallback search may write."""
    from pipeline.precision import quantize

    cfg = compose(*overrides, f"calibration.cache_dir={tmp_path / 'cache'}")
    dest = tmp_path / "qdq.onnx"
    result = quantize.quantize(
        layout.export_dir / "model.onnx", dest, cfg.precision, cfg.calibration, cfg.model
    )
    return cfg, result


def _export(tmp_path_factory: pytest.TempPathFactory, model: str) -> Layout:
    layout = Layout(tmp_path_factory.mktemp(f"{model}_export"))
    steps.export(compose(f"model={model}"), layout)
    return layout


@pytest.fixture(scope="session")
def bert_export(tmp_path_factory):
    """pipeline/zoo/outlier_bert.py exported: residual-stream outliers, as trained BERTs have."""
    return _export(tmp_path_factory, "outlier_bert")


@pytest.fixture(scope="session")
def cnn_export(tmp_path_factory):
    return _export(tmp_path_factory, "cnn")
