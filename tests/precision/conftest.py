"""Fixtures of the precision tests: exports made once and copied into each test's own
folder, and the int8/fp8 graphs of one calibration (real ModelOpt, real ONNX Runtime)."""

from __future__ import annotations

import pytest

from pipeline.core.layout import Layout
from pipeline.flow import stages
from tests.conftest import compose


def _export(tmp_path_factory: pytest.TempPathFactory, model: str) -> Layout:
    layout = Layout(tmp_path_factory.mktemp(f"{model}_export"))
    stages.export(compose(f"model={model}"), layout)
    return layout


@pytest.fixture(scope="session")
def bert_export(tmp_path_factory):
    """pipeline/zoo/outlier_bert.py exported: residual-stream outliers, as trained BERTs have."""
    return _export(tmp_path_factory, "outlier_bert")


@pytest.fixture(scope="session")
def cnn_export(tmp_path_factory):
    return _export(tmp_path_factory, "cnn")
